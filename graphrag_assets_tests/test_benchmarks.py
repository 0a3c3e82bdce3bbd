import json
import subprocess
import sys

from .workspaces import REPO

# In one interpreter: every benchmark's --help (the parser), and every benchmark module imported (what each
# command runs is imported only when it is chosen, so a broken import would otherwise wait for that command).
_EVERY_HELP = """
import contextlib, importlib, inspect, io, json, pathlib, re, sys
sys.path.insert(0, "scripts")
import benchmark
def usage(*args):
    out = io.StringIO()
    sys.argv = ["benchmark.py", *args]
    with contextlib.redirect_stdout(out):
        try:
            benchmark.main()
        except SystemExit as done:
            assert done.code == 0, (args, done.code)
    return out.getvalue()
commands = re.search(r"[{]([a-z,]+)[}]", usage("--help")).group(1).split(",")
helps = {command: usage(command, "--help") for command in commands}
modules = sorted(path.stem for path in pathlib.Path("scripts").glob("*_benchmark.py"))
for module in modules:
    importlib.import_module(module)
for entry in benchmark.BENCHMARKS:  # what each command runs is there, and takes the parsed arguments
    module, function = entry.run.split(":")
    assert list(inspect.signature(getattr(importlib.import_module(module), function)).parameters) == ["args"], entry
print(json.dumps({"helps": helps, "modules": modules}))
"""


def test_every_benchmark_answers_help_and_every_benchmark_module_imports():
    done = subprocess.run([sys.executable, "-c", _EVERY_HELP], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["helps"]) >= 15 and {"growth", "limits", "retrieval"} <= set(found["helps"])
    for command, text in found["helps"].items():
        assert text.startswith(f"usage: benchmark.py {command}"), (command, text[:200])
    assert len(found["modules"]) >= 15 and "limits_benchmark" in found["modules"]


def test_the_benchmarks_import_no_test_module():
    """What benchmarks and tests share lives in modules both import (workspaces.py, corpora.py, model_server/)."""
    for path in sorted((REPO / "scripts").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "conftest" not in text and "graphrag_assets_tests.test_" not in text, path.name

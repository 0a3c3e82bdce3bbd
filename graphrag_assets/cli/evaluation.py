"""graphrag-assets tune and evaluate: a corpus's prompts tuned to its text, and the paper's evaluation of it."""

import json
import sys

from .common import UserError, dagster_instance, instance_names, resource
from .runs import execute, open_store


def tune(corpus: str, run_config: dict, verbose: bool) -> int:
    """Tune the corpus's prompts, then show what tuning found and how each prompt differs from prompts/."""
    from ..method.tuning import prompt_diff

    resource("corpora").folder(corpus)  # a clear error for a name that is unsafe or has no folder
    instance, partitions = dagster_instance(), instance_names().name("corpus")
    if not instance.has_dynamic_partition(partitions, corpus):
        instance.add_dynamic_partitions(partitions, [corpus])
    result = execute("tune_prompts", corpus, run_config, verbose)
    if not result.success:
        from ..failures import failure_message

        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    with open_store() as conn:
        rows = conn.execute(
            "SELECT id, template, domain, persona, language, entity_types, examples, derived_by FROM tuned_prompts "
            "WHERE corpus = ? ORDER BY id",
            [corpus],
        ).fetchall()
    for name, template, *_ in rows:
        print(prompt_diff(name, template) or f"{name}: as in prompts/{name}.txt")
    _, _, domain, persona, language, types, examples, derived_by = rows[0]
    print(f"\ntuned prompts of {corpus} (run {result.run_id}), derived by {derived_by}")
    print(f"  domain:       {domain or '(needs a model)'}")
    print(f"  persona:      {persona or '(needs a model)'}")
    print(f"  language:     {language}")
    print(f"  entity types: {', '.join(json.loads(types))}")
    print(f"  examples:     {len(json.loads(examples))} written from the corpus's text")
    if derived_by.startswith("offline"):
        print(
            "\nwithout a model, tuning finds the kinds of thing the sample names most often and nothing else. They "
            "matter when a model indexes the corpus: the offline index finds noun phrases and uses no entity types. "
            "With GRAPHRAG_API_BASE set, a model tunes the domain, persona and examples too."
        )
    print(f"\nindex with them:  graphrag-assets index --corpus {corpus} --prompts tuned")
    return 0


def evaluate(corpus: str, run_config: dict, verbose: bool) -> int:
    if not resource("chat").configured:
        raise UserError(
            "the evaluation needs a chat model to write questions, answer them and judge the answers, and none is "
            "set: export GRAPHRAG_API_BASE (and GRAPHRAG_API_KEY) and run it again"
        )
    if not dagster_instance().has_dynamic_partition(instance_names().name("corpus"), corpus):
        raise UserError(
            f"corpus {corpus!r} was never indexed here: run `graphrag-assets index --corpus {corpus}` first"
        )
    result = execute("evaluate_corpus", corpus, run_config, verbose)
    if not result.success:
        from ..failures import failure_message

        print(f"failed: {failure_message(result)}", file=sys.stderr)
        return 1
    for event in result.get_asset_materialization_events():
        asset, metadata = event.materialization.asset_key.path[-1], event.materialization.metadata
        for name, value in metadata.items():
            if name.endswith(("_win_rates", "_accuracy")) or name in ("mean_per_answer", "agreement_with_judges"):
                print(f"\n## {asset}: {name.replace('_', ' ')}\n\n{value.value}")
    print(f"\nrun {result.run_id}: the heatmaps are in the win_rates asset's metadata in the Dagster UI")
    return 0

"""numba's compiled functions cached on disk, so a machine compiles them once and not every process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cached_compilation() -> Iterator[None]:
    """Compile the numba functions defined or built inside this block with cache=True.

    umap-learn declares its functions without it (pynndescent, which it uses, caches its own), so every
    fresh process spent about 10 s compiling before fitting a few hundred points. Its functions are
    defined when it is first imported and, for the layout, inside the fit: wrap both. The results are the
    same, bit for bit.
    """
    import numba

    njit = numba.njit

    def cached_njit(*args, **options):
        options.setdefault("cache", True)
        return njit(*args, **options)

    numba.njit = cached_njit
    try:
        yield
    finally:
        numba.njit = njit

"""The assets and automation of a prefixed instance (naming.py): the same functions under the instance's names.

Dagster finds an asset's, sensor's or schedule's resources by the names of its function's parameters, so one
function cannot serve two instances whose stores differ. The functions here stay as they are written; each
instance gets a wrapper whose parameters carry the instance's resource names and which hands them on under the
bare ones, and whose results are re-addressed to the instance's asset keys.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable

import dagster as dg

from .naming import InstanceNames


def renamed_resources(fn: Callable, names: InstanceNames, resources: Iterable[str]) -> Callable:
    """`fn` with its parameters named in `resources` renamed to the instance's resource names (itself, with no
    prefix). Results that name an asset of the instance by its bare key are re-addressed under the prefix."""
    if not names.prefix:
        return fn
    renamed = {bare: names.name(bare) for bare in resources}
    back = {new: bare for bare, new in renamed.items()}
    signature = inspect.signature(fn)

    def call(args, kwargs):
        return fn(*args, **{back.get(name, name): value for name, value in kwargs.items()})

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for item in call(args, kwargs):
                yield _readdressed(item, names)
    else:

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return _readdressed(call(args, kwargs), names)

    del wrapper.__wrapped__  # Dagster must read the signature below, not the function's own
    wrapper.__signature__ = signature.replace(
        parameters=[p.replace(name=renamed.get(p.name, p.name)) for p in signature.parameters.values()]
    )
    wrapper.__annotations__ = {renamed.get(k, k): v for k, v in fn.__annotations__.items()}
    return wrapper


def _readdressed(item, names: InstanceNames):
    key = getattr(item, "asset_key", None)
    if isinstance(item, (dg.MaterializeResult, dg.AssetCheckResult)) and key is not None and not names.owns(key):
        return item._replace(asset_key=names.key(key.path[-1]))
    return item


def renamed_assets(
    assets: list[dg.AssetsDefinition],
    names: InstanceNames,
    upstream: dict[str, list[dg.AssetKey]] | None = None,
) -> list[dg.AssetsDefinition]:
    """The assets under the instance's keys, groups, op names, resource names and partition set; `upstream` adds
    deps on assets of the user's project, by the bare name of the asset that reads them."""
    upstream = upstream or {}
    if not names.prefix and not upstream:
        return assets
    keys = {key: names.key(key.path[-1]) for assets_def in assets for key in assets_def.keys}
    partitions = dg.DynamicPartitionsDefinition(name=names.name("corpus"))
    return [_renamed(assets_def, keys, partitions, names, upstream) for assets_def in assets]


def _renamed(
    assets_def: dg.AssetsDefinition,
    keys: dict[dg.AssetKey, dg.AssetKey],
    partitions: dg.PartitionsDefinition,
    names: InstanceNames,
    upstream: dict[str, list[dg.AssetKey]],
) -> dg.AssetsDefinition:
    op = assets_def.op
    specs = [
        spec.replace_attributes(
            key=keys[spec.key],
            deps=[
                *(dg.AssetDep(keys.get(dep.asset_key, dep.asset_key)) for dep in spec.deps),
                *upstream.get(spec.key.path[-1], ()),
            ],
            group_name=names.group(spec.group_name),
            partitions_def=partitions if spec.partitions_def is not None else None,
        )
        for spec in assets_def.specs
    ]
    checks = [
        dg.AssetCheckSpec(check.name, asset=keys[check.asset_key], description=check.description)
        for check in assets_def.check_specs
    ]
    compute = renamed_resources(op.compute_fn.decorated_fn, names, op.required_resource_keys)
    return dg.multi_asset(
        specs=specs,
        check_specs=checks or None,
        name=names.name(op.name),
        partitions_def=partitions if assets_def.partitions_def is not None else None,
        can_subset=assets_def.can_subset,
        pool=op.pool,
        op_tags=op.tags,
        description=op.description,
    )(compute)

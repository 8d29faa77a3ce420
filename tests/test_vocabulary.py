"""One vocabulary (docs/conventions.md): no public function of refattn takes a parameter by a retired name.

Walked: every registry record's door (``function``) and ``apply``, and every function and method
in the ``__all__`` of each family package. A function decorated with :func:`refattn.deprecation.renamed`
keeps an old name only in its ``__renamed__`` table (its signature is the new one), so an old name
found in a signature is a parameter that was not renamed.
"""
from __future__ import annotations

import importlib
import inspect
import re

import pytest

from refattn import registry

FAMILIES = ("core", "sparse", "linear", "compressed", "lowrank", "prior", "heads", "positional", "beyond")

RETIRED = {
    "alignment": "causal",                    # causal=False / True / "top-left" / "bottom-right"
    "variant": "kind",
    "window_size": "window",
    "radius": "window",
}                                             # ``width`` stays: an image's width (axial, image_transformer, aft)
PLURAL_COUNT = re.compile(r"^n_([a-z][a-z_]*s)$")  # n_buckets, n_hashes, n_rounds: num_buckets, ...


def retired(name: str) -> str | None:
    """The name that replaces parameter ``name``, or None when ``name`` is current."""
    plural = PLURAL_COUNT.match(name)
    return RETIRED.get(name) or (f"num_{plural[1]}" if plural else None)


def _functions():
    """(qualified name, callable) of every public function: the records' doors and applies, the families' exports."""
    seen = {}
    for mech in registry.all():
        seen.setdefault(f"registry[{mech.id!r}].function", mech.function)
        if mech.apply is not None:
            seen.setdefault(f"registry[{mech.id!r}].apply", mech.apply)
    for family in FAMILIES:
        package = importlib.import_module(f"refattn.{family}")
        for name in getattr(package, "__all__", ()):
            obj = getattr(package, name)
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        seen.setdefault(f"refattn.{family}.{name}.{attr}", member)
            elif callable(obj):
                seen.setdefault(f"refattn.{family}.{name}", obj)
    return seen


FUNCTIONS = _functions()


def _parameters(fn):
    try:
        return inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):                                # builtins, numba dispatchers
        return ()


def test_the_walk_sees_the_catalogue():
    assert len([name for name in FUNCTIONS if name.endswith(".function")]) == len(registry.all())
    assert any(name.startswith("refattn.sparse.") for name in FUNCTIONS)


def test_no_parameter_has_a_retired_name():
    found = sorted(f"{where}({p.name}): say {retired(p.name)}"
                   for where, fn in FUNCTIONS.items() for p in _parameters(fn) if retired(p.name))
    assert found == [], "\n".join(found)


def test_method_defaults_to_auto():
    found = sorted(f"{where}(method={p.default!r})" for where, fn in FUNCTIONS.items() for p in _parameters(fn)
                   if p.name == "method" and p.default is None)
    assert found == [], "\n".join(found)


def _methods_tuples():
    """(where, tuple) of every module-level ``METHODS`` / ``*_METHODS`` tuple of the families and every record's
    ``methods``."""
    for mech in registry.all():
        yield f"registry[{mech.id!r}].methods", mech.methods
    for family in FAMILIES:
        package = importlib.import_module(f"refattn.{family}")
        modules = {package.__name__: package}
        for obj in vars(package).values():
            module = inspect.getmodule(obj)
            if module is not None and module.__name__.startswith(package.__name__ + "."):
                modules[module.__name__] = module
        for module_name, module in sorted(modules.items()):
            for attr, value in vars(module).items():
                if (attr == "METHODS" or attr.endswith("_METHODS")) and isinstance(value, tuple):
                    yield f"{module_name}.{attr}", value


def test_no_method_is_called_chunked():
    found = sorted({f"{where} = {value!r}: say 'chunk'" for where, value in _methods_tuples() if "chunked" in value})
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(("name", "new"), [("alignment", "causal"), ("variant", "kind"), ("n_buckets", "num_buckets"),
                                         ("n_hashes", "num_hashes"), ("window_size", "window"), ("width", None),
                                         ("radius", "window"), ("num_buckets", None), ("window", None), ("n", None),
                                         ("n_kv", None), ("causal", None), ("block_size", None)])
def test_retired_names_are_recognised(name, new):
    assert retired(name) == new


def test_a_renamed_function_shows_only_the_new_name():
    from refattn.deprecation import renamed

    @renamed(n_buckets="num_buckets")
    def door(q, k, v, *, num_buckets=4):
        return q

    assert [p.name for p in _parameters(door)] == ["q", "k", "v", "num_buckets"]
    assert door.__renamed__ == {"n_buckets": "num_buckets"}

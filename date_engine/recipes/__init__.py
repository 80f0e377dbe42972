"""Recipes: a model, its data and its metric, registered by name. The trainer never changes per
recipe.

A recipe is a :class:`Recipe` record. Its builders import torch when called, so that listing and
looking up recipes (``date plan`` reads ``dataset_size`` from here) stays free of torch.

Three ways in:

- ``@register_recipe`` on a function that returns a :class:`Recipe` (the built-ins do this);
- the entry-point group ``date_engine.recipes`` of an installed package, naming such a function;
- ``--recipe package.module:function`` on the command line, or ``recipe: package.module:function``
  in a spec.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.spec import shipped_specs

__all__ = ["DataOptions", "Recipe", "RecipeData", "check_heads", "copy_shipped", "get_recipe",
           "list_recipes", "register_recipe", "shipped_specs", "spec_recipe"]

ENTRY_POINT_GROUP = "date_engine.recipes"
_BUILTIN_MODULES = (
    "date_engine.recipes.digits",
    "date_engine.recipes.mnist",
    "date_engine.recipes.ptb",
    "date_engine.recipes.gpt",
    "date_engine.recipes.gnmt",
    "date_engine.recipes.imagenet",
    "date_engine.recipes.bert",
)


@dataclass(frozen=True)
class DataOptions:
    """What a recipe's data builder may need to know."""

    data_dir: str | None = None
    """Where the data set lies on disk (recipes that read files)."""
    seed: int = 0
    synthetic: bool = False
    """Build generated samples of the right shapes instead of reading data (for dry runs)."""


@dataclass
class RecipeData:
    """A recipe's data: map-style datasets and how to batch them."""

    train: Any
    """Training set: ``len()`` and indexing (``__getitems__`` for fast batching is honoured)."""
    eval: Any | None
    """Evaluation set, or None."""
    collate: Callable[[Any], Any] | None = None
    """DataLoader collate function (None: torch's default)."""
    note: str = ""
    """Shown to the user, e.g. that generated samples stand in for missing files."""
    context: dict[str, Any] = field(default_factory=dict)
    """What the recipe's loss and evaluation need besides the batch (a vocabulary, options)."""


@dataclass(frozen=True)
class Recipe:
    """Everything the trainer needs to know about one application."""

    name: str
    model_name: str
    """What the model is, in words."""
    dataset_name: str
    """What the data is, in words."""
    metric_name: str
    """Name of the evaluation metric, e.g. ``accuracy`` or ``perplexity``."""
    higher_is_better: bool
    default_micro_batch: int
    """Per-process micro-batch when neither the spec nor the command line sets one."""
    dataset_size: int | None
    """Training samples per epoch, when known without reading the data."""
    build_model: Callable[[Any], Any]
    """``build_model(options)``: a fresh ``torch.nn.Module`` (the trainer has seeded torch)."""
    build_data: Callable[[DataOptions, Any], RecipeData]
    """``build_data(data_options, options)``: the training and evaluation sets."""
    loss: Callable[[Any, Any, RecipeData], Any]
    """``loss(model, batch, data)``: the mean loss over the micro-batch, a scalar tensor."""
    evaluate: Callable[[Any, Any, RecipeData], dict[str, Any]]
    """``evaluate(model, batch, data)``: summable statistics (tensors, numbers) of an eval batch."""
    metric: Callable[[dict[str, float]], float]
    """The metric from statistics summed over the whole eval set."""
    options: type | None = None
    """A pydantic model of the recipe's options (the spec's ``model:`` section), or None."""
    details: Callable[[dict[str, float]], dict[str, float]] | None = None
    """Other numbers of an evaluation, from the same summed statistics, logged beside the metric
    (bert-mlm's loss on the masked tokens)."""
    description: str = ""
    requires: tuple[tuple[str, str, str], ...] = ()
    """Optional packages the recipe needs, as (module, pip extra of date-engine, what for):
    checked before a run starts, not at its first evaluation."""
    shard_units: Callable[[Any], list[Any]] | None = None
    """``shard_units(model)``: the modules ``train.parallel: fsdp`` shards as one unit each (their
    parameters are gathered together while they compute). None: the default of
    :func:`date_engine.train.runtime.shard_units`, each top-level block that holds parameters. A
    model that reads a block's parameter outside the block's own forward (a head tied to the
    embedding through ``F.linear``) must name its units, leaving that block with the root."""

    def parameter_count(self, options: Any) -> int:
        """The model's parameters, counted on torch's meta device: no memory, no weights (imports
        torch)."""
        import torch

        with torch.device("meta"):
            model = self.build_model(options)
        return sum(p.numel() for p in model.parameters())

    def check_requirements(self) -> None:
        """Refuse, with the install command, if a package the recipe needs is missing."""
        import importlib.util

        for module, extra, why in self.requires:
            if importlib.util.find_spec(module) is None:
                raise DateError(f"recipe {self.name} {why} with {module}, which is not installed; "
                                f"in the date_engine clone run: pip install -e '.[{extra}]'")

    def load_data(self, options: DataOptions, model: Any, dry_run: bool = False) -> RecipeData:
        """The recipe's data; for a dry run whose files are missing, generated samples of the
        recipe's shapes instead, with a note saying so."""
        from dataclasses import replace

        from date_engine.errors import DataMissing

        try:
            return self.build_data(options, model)
        except DataMissing as exc:
            if not dry_run:
                raise
            data = self.build_data(replace(options, synthetic=True), model)
            data.note = (f"{exc} The dry run steps on generated samples of the recipe's "
                         "shapes instead.")
            return data

    def parse_options(self, values: dict[str, Any] | None = None) -> Any:
        """The spec's ``model:`` section validated against this recipe's options."""
        values = dict(values or {})
        if self.options is None:
            if values:
                raise DateError(
                    f"model.{next(iter(values))}: recipe {self.name} takes no model "
                    "options; remove the model section."
                )
            return None
        from pydantic import ValidationError

        from date_engine.spec import describe_error

        try:
            return self.options.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            allowed = ", ".join(self.options.model_fields)
            if err["type"] == "extra_forbidden":
                field_name = ".".join(str(p) for p in err["loc"])
                raise DateError(
                    f"model.{field_name}: not an option of recipe {self.name}; its "
                    f"options: {allowed}."
                ) from None
            sentence = describe_error(err, prefix=("model",))
            raise DateError(f"{sentence[:-1]}; recipe {self.name}'s options: {allowed}.") from None


def check_heads(dim: int, heads: int) -> None:
    """For a transformer recipe's options: attention heads must split the width evenly."""
    if dim % heads:
        raise ValueError(f"dim {dim} does not split into {heads} heads; use a number of heads "
                         "that divides it")


def spec_recipe(spec: Any, ref: str | None = None, *, source: str = "the spec",
                to_train: bool = False, option: bool = False) -> Recipe | None:
    """The recipe ``ref`` names (default: the spec's), the spec's model options checked against
    it; None where none is named and nothing is to be trained (``date plan`` needs none).
    ``to_train``: one is needed and the packages it needs are checked; ``option``: the command has
    a --recipe option to name it with."""
    ref = ref if ref is not None else spec.recipe
    if ref is None:
        if not to_train:
            return None
        hint = " or pass --recipe" if option else ""
        raise DateError(f"{source}: no recipe to train; add 'recipe: <name>' to the spec{hint} "
                        "(see `date recipes`).")
    if not ref.strip():
        raise DateError("--recipe: empty; give a recipe name (date recipes lists them) or "
                        "package.module:function.")
    found = get_recipe(ref)
    found.parse_options(spec.model)  # a bad model option fails here
    if to_train:
        found.check_requirements()
    return found


def copy_shipped(name: str, dest: Path | None, force: bool) -> Path:
    """Copy the shipped baseline ``name`` to ``dest`` (a file, or a folder to put NAME.yaml in;
    default NAME.yaml here); refuses to overwrite without ``force``. Returns the path written."""
    from date_engine.checks import output_file

    shipped = shipped_specs()
    if name not in shipped:
        raise DateError(f"no shipped baseline '{name}'; choose one of {', '.join(shipped)}.")
    target = dest or Path(f"{name}.yaml")
    if target.is_dir():
        target = target / f"{name}.yaml"
    if target.exists() and not force:
        raise DateError(f"{target} exists; pass --force to overwrite it, or choose another DEST.")
    output_file(target, "DEST", (".yaml", ".yml"))
    target.write_text(shipped[name].read_text())
    return target


_REGISTRY: dict[str, Callable[[], Recipe]] = {}


def register_recipe(name: str) -> Callable[[Callable[[], Recipe]], Callable[[], Recipe]]:
    """Register ``fn`` (no arguments, returns a :class:`Recipe`) under ``name``."""

    def decorate(fn: Callable[[], Recipe]) -> Callable[[], Recipe]:
        _REGISTRY[name] = fn
        return fn

    return decorate


def list_recipes() -> list[Recipe]:
    """Every recipe: the built-ins and those of installed packages, sorted by name."""
    _load_builtins()
    names = set(_REGISTRY)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        names.add(ep.name)
    return [get_recipe(name) for name in sorted(names)]


def get_recipe(name: str) -> Recipe:
    """The recipe registered as ``name``, or built by ``name`` = ``package.module:function``."""
    if ":" in name:
        return _from_reference(name)
    _load_builtins()
    if name in _REGISTRY:
        return _checked(_REGISTRY[name](), name)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _checked(_call(ep.load(), name), name)
    known = sorted(_REGISTRY) + sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    raise DateError(
        f"unknown recipe '{name}'; known recipes: {', '.join(known)} (or give "
        "package.module:function); `date recipes` lists them."
    )


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def _import(module_name: str) -> Any:
    """``module_name``, also from the folder date runs in: ``python -m date_engine`` has that
    folder on sys.path, but the ``date`` console script has its own bin folder there instead."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != module_name.split(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        try:
            return importlib.import_module(module_name)
        except ImportError:
            sys.path.remove(here)
            raise


def _from_reference(reference: str) -> Recipe:
    module_name, _, attr = reference.partition(":")
    try:
        module = _import(module_name)
        target = getattr(module, attr)
    except (ImportError, AttributeError, ValueError) as exc:  # ValueError: an empty module name
        raise DateError(
            f"recipe '{reference}': cannot load {attr!r} from module {module_name!r} ({exc}); "
            "check that the module is importable (on PYTHONPATH) and defines it."
        ) from None
    return _checked(_call(target, reference), reference)


def _call(target: Any, name: str) -> Any:
    if isinstance(target, Recipe):
        return target
    try:
        return target()
    except TypeError as exc:
        raise DateError(
            f"recipe '{name}': calling {getattr(target, '__name__', target)!r} failed "
            f"({exc}); a recipe function takes no arguments and returns a "
            "date_engine.recipes.Recipe."
        ) from None


_CALLS = {"build_model": 1, "build_data": 2, "loss": 3, "evaluate": 3, "metric": 1}
"""How many positional arguments the trainer passes each of a recipe's functions
(``loss(model, batch, data)``: docs/training.md, "Recipes")."""


def _checked(recipe: Any, name: str) -> Recipe:
    if not isinstance(recipe, Recipe):
        raise DateError(
            f"recipe '{name}' did not produce a date_engine.recipes.Recipe "
            f"(got {type(recipe).__name__})."
        )
    import inspect

    for field_name, count in _CALLS.items():
        function = getattr(recipe, field_name)
        try:
            inspect.signature(function).bind(*range(count))
        except TypeError:
            raise DateError(
                f"recipe '{name}': {field_name} is called with {count} argument"
                f"{'s' if count > 1 else ''} ({_SIGNATURES[field_name]}), but "
                f"{getattr(function, '__name__', field_name)}{inspect.signature(function)} "
                "does not take them; see docs/training.md, Recipes."
            ) from None
        except ValueError:  # a builtin without a signature: trust it
            continue
    return recipe


_SIGNATURES = {"build_model": "options", "build_data": "data_options, options",
               "loss": "model, batch, data", "evaluate": "model, batch, data",
               "metric": "statistics"}

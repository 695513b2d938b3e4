"""MetaSchedule's design space of any TIR function as a template: its sampling decisions become
the knobs.

TVM's space generator (``PostOrderApply`` with the target's default schedule rules) turns a
workload's TIR into a few design spaces ("sketches"). Each is a trace whose sampling
instructions hold decisions: tile sizes (``SamplePerfectTile``), an unroll budget or a vector
length (``SampleCategorical``) and where a producer is computed (``SampleComputeLocation``).
`MetaScheduleTemplate` makes one knob of each decision, named after the block and loop it acts
on, plus a ``sketch`` knob where there are several design spaces; a config replays the chosen
sketch's trace with its decisions and runs the target's postprocessors, as MetaSchedule does
with its own candidates. Some tile decisions are narrowed (`tensortune.templates.narrowed_axes`):
a batch axis (the 36 products of a Winograd convolution, attention's heads) stays out of the
register tile, and on CPUs an axis that does not index a large weight stays inside it.

The TVM objects (the design spaces and the postprocessors) are made once per process and
workload, and never travel: the template itself holds plain Python values.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tensortune.errors import TensortuneError, last_line
from tensortune.templates.base import InvalidConfig, KnobTemplate
from tensortune.templates.knobs import ChoiceKnob, factorizations
from tensortune.templates.narrowed_axes import narrow, plain_name
from tensortune.templates.winograd_sketch import fused_sketches

if TYPE_CHECKING:
    from tvm.s_tir import Schedule

    from tensortune.workloads import Workload

#: The sampling instructions that become knobs, by TVM instruction kind.
TILE, CATEGORICAL, COMPUTE_AT = "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation"
#: Name of the knob that picks MetaSchedule's design space, where there are several.
SKETCH = "sketch"
#: Name of the knob that picks one of our own design spaces instead, where a workload has them
#: (`tensortune.templates.winograd_sketch`): 0 is MetaSchedule's (the one `SKETCH` names), i
#: the i-th of ours. A knob of its own, so that a study tuned before ours existed keeps its
#: `SKETCH` choices (Optuna refuses one name with two choice sets) and its configs apply.
FUSED = "fused"
#: Values of a compute-location knob before the loop positions: MetaSchedule's -2 and -1.
INLINE, ROOT = "inline", "root"
#: MetaSchedule's rule sets by target kind. The llvm set is named explicitly: on a CPU with VNNI
#: ``from-target`` picks the int8 rules, which need the tensor intrinsics (15-19 s to import).
RULE_SETS = {"llvm": "llvm", "cuda": "cuda"}
#: What MetaSchedule's CUDA rules need to know of the GPU where the target dict does not say:
#: the limits of every NVIDIA GPU since Volta (48 KiB is the static shared memory of a block).
CUDA_LIMITS = {
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,
    "thread_warp_size": 32,
}


@dataclasses.dataclass(frozen=True)
class Decision:
    """One sampling instruction of a sketch and the knob that decides it.

    Attributes:
        index: Position of the instruction in the sketch's trace.
        kind: `TILE`, `CATEGORICAL` or `COMPUTE_AT`.
        knob: Name of the knob.
        candidates: For `CATEGORICAL`, the values the decision's index points into.
    """

    index: int
    kind: str
    knob: str
    candidates: tuple[int, ...] = ()


class MetaScheduleTemplate(KnobTemplate):
    """Knobs → schedule over MetaSchedule's design space of `workload` on `target`.

    Knobs: one per sampling decision of every sketch (tile splits as ``"8x4x2x16"``, outer to
    inner, limited like the sampling instruction's own innermost factor, and for some axes
    narrowed under a name of their own, `tensortune.templates.narrowed_axes`; categoricals by
    their values, e.g. the unroll budget; compute locations as ``"inline"``, ``"root"`` or
    ``"loop<i>"``, the i-th loop of the consumer), plus ``sketch`` where there are several,
    and ``fused`` where the workload also has design spaces of ours (`FUSED`; on CPUs, the
    NHWC Winograd convolution's stages fused per block of tiles,
    `tensortune.templates.winograd_sketch`). A knob that acts on the same block and loop with
    the same choices in several sketches is one knob; a sketch ignores the knobs of the
    others, so every config names a value for all.
    Compute locations that the other decisions make impossible fall back to the nearest
    outer one, as MetaSchedule's own replay does.

    Args:
        workload: The operator at its shape; any `tensortune.workloads.Workload`.
        target: Target dict (`tensortune.target.target_spec`); its kind picks the schedule
            rules and postprocessors (`RULE_SETS`).
        seed: Seed of the space generator (default 0). It fixes the design spaces' own sampled
            decisions, which every config replaces, so it changes nothing but the order of
            equal-cost internals; stored so that every process rebuilds the same spaces.

    Raises:
        TensortuneError: If the target kind has no default schedule rules, or TVM cannot
            generate a design space for the workload.
    """

    def __init__(self, workload: Workload, target: dict[str, Any], seed: int = 0) -> None:
        self.workload = workload
        self.target = dict(target)
        self.seed = seed
        if self.target.get("kind") not in RULE_SETS:
            raise TensortuneError(
                f"no MetaSchedule design space for target kind {self.target.get('kind')!r}: "
                f"one of {', '.join(RULE_SETS)}"
            )
        spaces = _spaces(self)
        self.own_sketches = spaces.own
        self._knobs, self.decisions = _read_knobs(
            spaces.sketches, spaces.mod, spaces.own, streamed=self.target["kind"] == "llvm"
        )

    @property
    def knobs(self) -> list[ChoiceKnob]:
        """The sketch knob (where there are several sketches), then every decision's knob in
        trace order."""
        return list(self._knobs)

    def sketch_of(self, config: Mapping[str, Any]) -> int:
        """The index (into `decisions`) of the design space `config` picks: ours where its
        `FUSED` knob says so, else MetaSchedule's `SKETCH` (default 0 for both)."""
        fused = int(config.get(FUSED, 0))
        if fused:
            return len(self.decisions) - self.own_sketches + fused - 1
        return int(config.get(SKETCH, 0))

    def check(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config restricted to the knobs (`KnobTemplate.check`). A narrowed axis's split
        may also come under the loop's plain name, as stored before its narrowing: then any
        split of the loop is taken, its narrowed levels too. A config stored before our own
        design spaces existed has no `FUSED` knob nor theirs: it picks MetaSchedule's, and the
        knobs only the others read take their first choice."""
        config = dict(config)
        if self.own_sketches and FUSED not in config:
            config[FUSED] = 0
        sketch = self.sketch_of(config)
        if 0 <= sketch < len(self.decisions):
            read = {d.knob for d in self.decisions[sketch]} | {FUSED}
            if sketch < len(self.decisions) - self.own_sketches:
                read.add(SKETCH)
            for knob in self._knobs:
                if knob.name not in config and knob.name not in read:
                    config[knob.name] = knob.choices[0]
        stored = {}
        for knob in self._knobs:
            plain = plain_name(knob.name)
            if plain == knob.name:
                continue
            if knob.name in config and config[knob.name] not in knob.choices:
                # A stored split, as this method returns it (so that it takes its own result).
                config[plain] = config.pop(knob.name)
            if knob.name not in config and plain in config:
                value = config.pop(plain)
                if not _same_loop(value, knob.choices[0]):
                    raise ValueError(f"knob {plain}={value!r} is no split of its loop")
                stored[knob.name] = value
                # Its narrowed levels may be other than 1: checked above, not among the choices.
                config[knob.name] = knob.choices[0]
        return {**super().check(config), **stored}

    def apply(self, config: Mapping[str, Any]) -> Schedule:
        """Replay the config's sketch with its decisions and run the postprocessors; the
        schedule, or `InvalidConfig` with the reason TVM gave."""
        from tvm import s_tir

        config = self.check(config)
        spaces = _spaces(self)
        sketch = self.sketch_of(config)
        trace = spaces.sketches[sketch].trace
        chosen = {
            trace.insts[d.index]: _decision(d, config[d.knob]) for d in self.decisions[sketch]
        }
        # Every decision is given; the seed (which TVM wants positive) draws none.
        sch = s_tir.Schedule(spaces.mod, seed=self.seed + 1, error_render_level="none")
        try:
            trace.apply_to_schedule(
                sch,
                remove_postproc=True,
                decision_provider=lambda inst, inputs, attrs, old: chosen.get(inst, old),
            )
        except (s_tir.ScheduleError, ValueError) as err:
            raise InvalidConfig(last_line(err)) from err
        sch.enter_postproc()
        for postproc in spaces.postprocs:
            name = type(postproc).__name__
            try:
                accepted = postproc.apply(sch)
            except Exception as err:
                raise InvalidConfig(f"{name}: {last_line(err)}") from err
            if not accepted:
                raise InvalidConfig(f"{name} rejected the schedule")
        return sch


def _same_loop(split: Any, other: Any) -> bool:
    """Whether tile split `split` (``"8x4x2x16"``) has as many levels as `other`, over the
    same extent."""
    mine, theirs = ([int(f) for f in str(v).split("x")] for v in (split, other))
    return len(mine) == len(theirs) and math.prod(mine) == math.prod(theirs)


def _decision(decision: Decision, value: Any) -> Any:
    """A knob's value as the trace's decision."""
    if decision.kind == TILE:
        return [int(f) for f in str(value).split("x")]
    if decision.kind == CATEGORICAL:
        return decision.candidates.index(int(value))
    return {INLINE: -2, ROOT: -1}.get(value) if value in (INLINE, ROOT) else int(value[4:])


# -- the design spaces, once per process ---------------------------------------------------------
@dataclasses.dataclass
class _Spaces:
    mod: Any
    sketches: list[Any]  # MetaSchedule's, then our own
    postprocs: list[Any]
    own: int = 0  # how many of the sketches are ours, at the end


_CACHE: dict[str, _Spaces] = {}


def _spaces(template: MetaScheduleTemplate) -> _Spaces:
    """The design spaces and postprocessors of a template's workload and target, generated once
    per process."""
    key = json.dumps([template.workload.key, template.target, template.seed], sort_keys=True)
    found = _CACHE.get(key)
    if found is None:
        found = _CACHE[key] = _generate(template)
    return found


def _generate(template: MetaScheduleTemplate) -> _Spaces:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import _ffi_api
    from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

    from tensortune.target import make_target

    kind = RULE_SETS[template.target["kind"]]
    target = template.target
    if kind == "cuda":
        target = {**CUDA_LIMITS, **target}
    mod = tvm.IRModule({"main": template.workload.prim_func()})
    generator = ms.space_generator.PostOrderApply(sch_rules=kind, postprocs=kind, mutator_probs={})
    # TuneContext's constructor imports every tensor intrinsic (15-19 s) for rules we do not
    # use; these are the two calls it makes after that import.
    context = ms.TuneContext.__new__(ms.TuneContext)
    context.__init_handle_by_constructor__(
        _ffi_api.TuneContext,
        mod,
        make_target(target),
        generator,
        None,
        "main",
        1,
        template.seed,
        get_logging_func(get_logger("tensortune")),
    )
    try:
        _ffi_api.TuneContextInitialize(context)
        sketches = list(context.generate_design_space())
    except Exception as err:
        raise TensortuneError(
            f"MetaSchedule cannot make a design space for {template.workload.name}: "
            f"{last_line(err)}"
        ) from err
    if not sketches:
        raise TensortuneError(f"MetaSchedule made no design space for {template.workload.name}")
    own = fused_sketches(mod, template.seed) if kind == "llvm" else []
    return _Spaces(mod, sketches + own, list(context.space_generator.postprocs), len(own))


# -- knobs from the sketches' decisions ---------------------------------------------------------
def _read_knobs(
    sketches: list[Any], mod: Any, own: int = 0, streamed: bool = False
) -> tuple[list[ChoiceKnob], list[list[Decision]]]:
    """The knobs of all sketches (shared where name and choices agree) and, per sketch, its
    decisions in trace order; the last `own` sketches are ours (default 0), picked by `FUSED`.
    With `streamed` (default False; the CPU rules) an axis that does not index a large weight
    is narrowed too (`tensortune.templates.narrowed_axes.narrow`)."""
    knobs: dict[str, ChoiceKnob] = {}
    if len(sketches) - own > 1:
        knobs[SKETCH] = ChoiceKnob(SKETCH, tuple(range(len(sketches) - own)))
    if own:
        knobs[FUSED] = ChoiceKnob(FUSED, tuple(range(own + 1)))
    per_sketch = []
    for number, sketch in enumerate(sketches):
        decisions = []
        for index, name, kind, choices, candidates in _walk(sketch.trace, mod, streamed):
            if name in knobs and knobs[name].choices != choices:
                name = f"{name}@{number}"
            knobs.setdefault(name, ChoiceKnob(name, choices))
            decisions.append(Decision(index, kind, name, candidates))
        per_sketch.append(decisions)
    return list(knobs.values()), per_sketch


def _walk(
    trace: Any, mod: Any, streamed: bool
) -> list[tuple[int, str, str, tuple[Any, ...], tuple[int, ...]]]:
    """(index, knob name, kind, choices, categorical candidates) of each sampling instruction
    of `trace`, read by replaying it on `mod` (the loops and blocks it names exist only while
    it replays); `streamed` as `_read_knobs` takes it."""
    from tvm.s_tir import Schedule

    replay = Schedule(mod)
    insts = list(trace.insts)
    found: dict[int, list[Any]] = {}

    def provider(inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
        index = next(i for i, other in enumerate(insts) if other.same_as(inst))
        kind = inst.kind.name
        if kind == TILE:
            loop = replay.get(inputs[0])
            blocks = replay.get_child_blocks(inputs[0])
            block = replay.get(blocks[0]).name_hint if blocks else "loop"
            levels, innermost = int(attrs[0]), int(attrs[1])
            extent = int(loop.extent)
            limit = extent if innermost <= 0 else innermost
            splits = factorizations(extent, levels, limit)
            name = f"{block}.{loop.loop_var.name}"
            name, splits = narrow(loop, replay.mod, name, splits, streamed)
            choices = tuple("x".join(map(str, s)) for s in splits)
            found[index] = [name, kind, choices, ()]
        elif kind == CATEGORICAL:
            candidates = tuple(int(c) for c in attrs[0])
            found[index] = [f"categorical{index}", kind, candidates, candidates]
        elif kind == COMPUTE_AT:
            block = replay.get(inputs[0]).name_hint
            consumers = replay.get_consumers(inputs[0])
            loops = len(replay.get_loops(consumers[0])) if consumers else 0
            choices = (INLINE, ROOT, *(f"loop{i}" for i in range(loops)))
            found[index] = [f"{block}.compute_at", kind, choices, ()]
        elif kind == "Annotate" and len(inst.inputs) > 1:
            _name_categorical(trace, inst, inputs, attrs, found, replay)
        return decision

    trace.apply_to_schedule(replay, remove_postproc=True, decision_provider=provider)
    return [(i, *found[i]) for i in sorted(found)]


def _name_categorical(
    trace: Any, inst: Any, inputs: Any, attrs: Any, found: dict[int, list[Any]], replay: Any
) -> None:
    """Name a categorical knob after the annotation that consumes its value (e.g. the root
    block's ``meta_schedule.unroll_explicit`` becomes ``root.unroll_explicit``)."""
    value = inst.inputs[1]
    for index, entry in found.items():
        if entry[1] != CATEGORICAL or not entry[0].startswith("categorical"):
            continue
        if trace.insts[index].outputs[0].same_as(value):
            target = replay.get(inputs[0])
            owner = getattr(target, "name_hint", None) or target.loop_var.name
            key = str(attrs[0]).strip('"').removeprefix("meta_schedule.")
            entry[0] = f"{owner}.{key}"

"""`CostModelSampler`: the paper's learned search as an Optuna sampler."""

from __future__ import annotations

import dataclasses
import math
import threading
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial, TrialState

from tensortune.cost_model import (
    ACQUISITIONS,
    COST_MODELS,
    DEFAULT_COST_MODEL,
    LOSSES,
    make_cost_model,
)
from tensortune.sampler.history import History, KnobSpace, design_leads, read_history
from tensortune.sampler.nearest_studies import AUTO
from tensortune.sampler.proposals import propose_round
from tensortune.sampler.screening import Screen, recent_pool
from tensortune.sampler.settings import SEARCHES, RoundSettings, evolve_sizes
from tensortune.sampler.source_weighting import MIN_EVIDENCE, SOURCE_ROWS, SOURCE_WEIGHTINGS
from tensortune.sampler.warm_start import WarmStart
from tensortune.search import random_configs, space_filling, unseen_random_configs
from tensortune.target import host_cores
from tensortune.trial_records import claim_config, claimed_by_another, steered_by_sources

if TYPE_CHECKING:
    from tensortune.cost_model import CostModel
    from tensortune.features import FeatureExtractor
    from tensortune.templates import Template


class CostModelSampler(BaseSampler):
    """Proposes configs of a schedule template with a learned cost model (AutoTVM's method).

    Each round fits a bootstrap ensemble of cost models (XGBoost over program features, or a
    TreeGRU over the loop tree itself) on the loop programs measured so far, runs parallel
    simulated annealing over the knob space with the acquisition as energy (chains continue
    from the last round), keeps the best
    ``candidate_factor * batch_size`` configs never measured or in flight, picks
    ``batch_size`` of them for quality and diversity, swaps an ``epsilon`` share for random
    configs, and hands them out to the next trials. Trials that are running (other threads or
    processes on the same storage) count as taken, so no config is measured twice.

    Prior studies (``source_studies``) warm-start it: their measured configs, encoded with the
    same operator-independent features, train the model next to the study's own, so the model
    proposes from the first trial; every other trial of the first ``n_startup_trials`` still
    comes from the space-filling design (``source_startup_share``), so that the study can
    judge its sources on configs they did not choose. Their weight halves every
    ``source_half_life`` trials of the study's own and, with ``source_weighting="evidence"``
    (or ``"relative"``, ``"outranked"``), follows how well each source ranks the study's own
    measured configs, down to nothing for one that misleads; once all weigh nothing, the
    study goes on as a cold one (the rest of the design, the cold feature set, a model of the
    configs the sources did not steer). Their best
    configs, moved into the study's knob space where the knobs match, start annealing chains
    until the study has enough good configs of its own.

    The study's trials are the only state that matters: the queue of proposals and the chain
    states are a cache that a new process rebuilds from the trials. Each trial records where
    its config came from in the ``tensortune:proposal`` system attr.

    Args:
        template: The knobs → schedule template. Default None: built from the study's
            ``workload``/``shape`` user attrs, as `tensortune.tune` writes them.
        cost_model: One of `tensortune.cost_model.COST_MODELS`: ``"xgb"``
            (`tensortune.cost_model.BootstrapXGBModel`) or ``"treegru"``
            (`tensortune.cost_model.treegru.TreeGRUModel`, needs PyTorch; each round goes on
            training the last round's networks, but for fresh ones once the sources weigh
            less than half what they did when those began). Default ``"xgb"``: it needs no
            PyTorch, trains about 40× faster and ranks held-out configs of one workload as
            well or better (``studies/cost_models.py``); the TreeGRU found faster kernels
            from 128 trials on in 256-trial studies of matmul 1024 and conv2d C7 (3 seeds,
            ``studies/README.md``) and transfers better across operators.
        feature_set: Program features, one of `tensortune.features.FEATURE_SETS`. Default
            None: for xgb without `source_studies` (or with sources that all search this very
            design space: `tensortune.sampler.transfer.same_space`), on the CPU template or
            MetaSchedule's space for a CPU (`tensortune.features.knob_features_fit`), ``"knob"``
            (`tensortune.features.knob` and `tensortune.features.decisions`, computed from the
            knob values without TVM, so a round can score 10^4 configs; it ranks recorded
            configs about as well as ``"curve"``, but transfers from other shapes worse), else
            the model's own: ``"curve"`` for
            xgb (operator-independent, so prior studies of other operators can train it) and
            ``"loop-tree"`` for treegru, which reads nothing else.
        search: How a round looks for candidates, one of
            `tensortune.sampler.settings.SEARCHES`: ``"evolve"``
            (`tensortune.search.evolve`: space-filling points plus the measured best, bred by
            crossover and multi-knob mutation; with knob features about 10^4 configs scored a
            round, else about 600) or ``"anneal"`` (AutoTVM's parallel annealing with one-knob
            steps, `n_chains` x `anneal_steps`). Default ``"evolve"``.
        loss: One of `tensortune.cost_model.LOSSES`: ``"rank"`` (pairwise ranking, the
            paper's choice: only the order matters) or ``"reg"`` (squared error on relative
            throughput). Default ``"rank"``.
        acquisition: One of `tensortune.cost_model.ACQUISITIONS`: ``"mean"``, ``"ei"`` or
            ``"ucb"`` over the ensemble's mean and spread.
            Default ``"mean"``: the paper found that uncertainty did not help this search.
        n_models: Bootstrap ensemble size. Default 3: enough for a spread, and training
            stays cheap.
        n_startup_trials: Trials before the first model, from a seeded space-filling design
            (scrambled Sobol over the knobs' choice indices). Default 16.
        batch_size: Configs proposed per model round. Default 8, `tensortune.tune`'s batch.
        candidate_factor: The annealer keeps this many candidates per batch slot for the
            diversity-aware selection (the paper's λ). Default 3.0.
        diversity: Weight of a new knob value in the selection; 0 picks the top scores,
            None uses `tensortune.search.diverse_greedy`'s default (0.5 / number of knobs).
            Default None.
        epsilon: Expected share of each batch chosen at random. Default 0.05, the paper's.
        n_chains: Parallel annealing chains. Default 32.
        anneal_steps: Annealing steps per round at least (more when a batch needs more
            candidates). Default 8: chains persist, so the search continues across rounds
            while each round stays cheap next to measuring its batch.
        restart_share: Share of the chains moved to the best measured configs at the start of
            each round. Default 0.5: on conv2d C7 it beat 0.25 on both seeds tried (174 against
            131 and 85 against 46 GFLOP/s at 32 trials), refining the incumbents as
            MetaSchedule's evolutionary search does.
        explore_share: Share of each model round's batch (rounded to whole configs) taken
            from a second search that only scores configs at least `explore_distance` knobs
            from every config the study has measured or has in flight: the best predicted of
            the unexplored space, so that the study does not only polish the region its start
            found. Default 0.25 (2 of a batch of 8): in the 64-trial goal run, 58-90 % of the
            proposals without it were one knob from a measured config, and the studies that
            lost most to TPE (depthwise and conv2d C12, seed 0) never left the first good
            region they found. 0 turns it off.
        refit_growth: How much the measured history must grow, as a share of the rows the
            cost model was last fit on (and by at least one batch), before a round fits it
            again; rounds in between search with the last model (and the history's latest
            best configs and taken set). Default 0.05: a study fits every round, as AutoTVM
            does, up to 160 trials (so every 64-trial study is unchanged), and with 1000
            trials of history every 56 trials instead of every 8. Fitting three boosters on
            1000 rows took 0.3-0.5 s a round on the 2-core VM, against 0.65 s to build and
            time one config of conv2d C12, and 8 more rows change little of what 1000 teach.
            0 fits every round. Studies with prior ``source_studies`` fit every round (their
            source weights follow each batch).
        explore_distance: Knobs in which an explore-share config must differ from every taken
            one. Default 3: TPE's proposals on the same studies were 2-5 knobs from their
            nearest measured config; the templates have 8-11 knobs.
        source_studies: Prior tensortune studies to learn from, from any storage, of any
            workload measured on the study's target, or ``"auto"``: those of the study's own
            storage, nearest program first (`tensortune.sampler.nearest_studies.find_sources`, at
            most `tensortune.sampler.nearest_studies.AUTO_SOURCES`), found when the study's first
            config is asked for (`tensortune.tune` finds them before it starts, and keeps
            their names in the study's ``transfer_sources`` user attr). Default ``()``: a cold
            start. They are
            read, never written, when the first proposal is made; one on another target, with
            no completed trial, or not made by tensortune raises `TensortuneError` then (and
            `tensortune.tune` checks them before it creates its study).
        source_half_life: Trials of the study's own after which a source row's weight has
            halved. Default 32.0: on held-out configs of five workloads
            (``studies/transfer_model.py``) half-lives from 8 to infinity ranked alike up to
            32 local trials, and 32 leaves the sources a quarter of a local row's weight at 64.
        source_weighting: How source rows weigh, one of
            `tensortune.sampler.source_weighting.SOURCE_WEIGHTINGS`. Default ``"evidence"``: once
            the study measured `tensortune.sampler.source_weighting.MIN_EVIDENCE` configs, a model
            of each source workload alone ranks them, and the source keeps its decayed weight in
            proportion to that ranking's Kendall tau (full from
            `tensortune.sampler.source_weighting.FULL_TAU`, none at or below 0), so a source that
            misleads stops counting; ``"relative"``: the same, but full trust needs a tau
            as high as the study's own configs reach on each other (cross-validated, 4 more
            one-member fits a round where the evidence left a source any weight), so sources
            fade as the study outgrows them;
            ``"outranked"``: the evidence's weight, and none for a source that ranks them at
            most half as well as the study's own configs rank each other (full at as well);
            ``"shared"``: the evidence's weights split among the source workloads;
            ``"decay"``: the half-life alone; ``"guarded"``: the half-life alone, and nothing
            for a source that ranks them reversed beyond chance
            (`tensortune.sampler.source_weighting.reversed_beyond_chance`); ``"validated"``: the
            evidence's weights while a model trained with them ranks the study's held-out
            configs at least as well as one without (the same 4 folds, 8 more one-member
            fits a round), none once it ranks them worse; ``"capped"``: the evidence's
            weights, scaled so that the sources' rows together weigh at most as much as the
            study's own; ``"beyond-chance"``: the evidence's weights, and from the study's
            `tensortune.sampler.source_weighting.CHANCE_FROM` (16) configs on nothing for a
            source whose tau is within one standard deviation of what an unrelated source's
            would be (`tensortune.sampler.source_weighting.within_chance`). Once
            every source weighs nothing the study drops them, first measures the rest of
            the cold study's start-up design, and from then on its model learns only from
            configs the sources did not steer (`tensortune.trial_records.steered_by_sources`),
            so that it goes on as the cold study of its seed (config for config where trials
            are asked one at a time; in batches the sources' picks shift its model rounds).
            Each round's weights
            are in the ``source_weights`` of its trials' ``tensortune:proposal`` attr.
        source_rows: Which source rows a cost model that goes on training from round to round
            (the TreeGRU) fits on, one of `tensortune.sampler.source_weighting.SOURCE_ROWS`. Default
            ``"drawn"``: each fit draws a share of a source's rows as its weight is worth
            (``sqrt(weight)`` for the rank loss, every pair then at the weight it had), however
            little that is. With every row, fits with the sources took 57 of a warm TreeGRU
            study's 104 s on C12 -> C7; drawn by weight with the fade, a warm study took 1.49x
            cold's wall time there against 2.07x; without it, 1.08x as long again on
            leave-one-out C2 (``studies/README.md``, transfer). ``"by-weight"``: the same draw,
            and a source whose rows together weigh under
            `tensortune.sampler.source_weighting.FADED_SHARE` of the study's own configs leaves
            the fit (its weight then reads 0); over three pairs it found level at 16-64 trials
            and 0.93x [0.85, 1.01] as fast kernels at 128. ``"all"``: every row in every fit at
            its weight. XGBoost, fit afresh each round in a fraction of a second, always takes
            every row.
        source_starts: How many of the sources' best configs (see
            `tensortune.sampler.transfer.project_config`) may start annealing chains while the
            study has fewer good configs of its own than restart slots. Default 16, the
            restart slots of the default ``n_chains`` and ``restart_share``; 0 leaves the
            chains to the study's own configs.
        source_startup_share: Share of a warm study's first `n_startup_trials` that the
            source-trained model proposes; the rest follow the cold study's start-up design,
            so that the study can judge its sources on configs they did not choose. Default
            0.5: every other one, the first the model's. 0 measures the whole design first,
            as the cold study of the seed does, and lets the sources in from the first
            model round; 1 leaves the design out.
        yield_to_design: Whether a start-up trial of a warm study that is the sources' model's
            (see `source_startup_share`) goes to the next point of the cold design instead
            while the fastest config measured from that design beats the fastest measured
            from anywhere else (`tensortune.sampler.history.design_leads`): the sources keep
            their share of the start-up only while their proposals hold up. Default False: on
            the four conv2d shape pairs (5 seeds each, 128 trials) it tied the default, 0.97-1.10x
            pooled at 16-128 trials, and on conv2d -> depthwise it never fired; with a batch of
            8 it decides once, on 4 configs from each side (``studies/README.md``, transfer).
        drop_outpaced: Whether a warm study drops its sources during its start-up, once it
            has measured `tensortune.sampler.source_weighting.MIN_EVIDENCE` configs, where the
            fastest config measured from the cold design beats the fastest the sources' model
            chose (`tensortune.sampler.history.design_leads`): sources whose picks lose to
            space-filling points mislead where it matters, at the top, however well they
            order the rest (Kendall tau). The study then goes on as the cold study of its
            seed. Default True: from MobileNet's depthwise layer to matmul 1024 (5 seeds, 128
            trials, XGBoost) it dropped the source at trial 8 on every seed and found 1.20x
            [1.02, 1.58] and 1.14x as fast kernels as without at 16 trials in two timings,
            1.10-1.11x at 64 and 0.97-0.98x at 128 (ties; before 8c348b4); on conv2d ->
            depthwise and C12 -> C7 it never fired (``studies/README.md``, transfer). False
            keeps the sources through the start-up whatever their picks.
        keep_start_up_picks: Whether a study that dropped its sources keeps in its model the
            configs their model chose during the start-up (its first `n_startup_trials`),
            leaving out only those they steered after it. Default False: every steered config
            is left out. On depthwise -> matmul (5 seeds, 128 trials) keeping them in tied
            leaving them out (0.96x the default, before 8c348b4); over ten seeds a cold study
            with four random configs measured first read 0.87-0.89x cold, the warm start
            0.88x before 8c348b4 and 0.94x after (``studies/README.md``, transfer).
        local_share: Share of a warm study's trials after the start-up that a cold twin
            proposes: a sampler of these settings without sources, so a model of the study's
            own configs alone, with the cold feature set and search. It keeps a search of
            the study's own going beside the sources' model, which can hold every proposal
            in the region the sources favour. Its proposals are marked ``"local model"`` (or
            ``"local explore"``, ...) in the ``tensortune:proposal`` attr. Default 0.0: the
            source-trained model proposes them all.
        screen_share: Where a round's candidates are lowered for program features (sources, the
            TreeGRU) on a template with knob features (`tensortune.features.knob_features_fit`:
            the CPU ones), the share of each search step's candidates lowered: the rest are
            ruled out by a knob-feature model of the round's model's scores, fit on the
            configs lowered in earlier rounds (`tensortune.sampler.screening`). Default 0.25:
            warm C12 → C7 studies of 128 trials (5 seeds) took 1.48x a cold study's wall time
            with it against 2.48x without, and found as fast kernels (re-timed, 0.96-1.09x at
            16-128 trials; ``studies/README.md``, transfer). From an unrelated source
            (depthwise -> matmul, 10 seeds) it tied cold but was 0.81x [0.68, 0.97] the
            unscreened warm start at 64 trials, and 0.81x again in a later run of 5 seeds; on
            that matmul target it saves no time. 1 lowers every candidate.
        feature_processes: Processes that lower a round's candidates for program features,
            this one included (`tensortune.features.FeatureExtractor`'s ``processes``; the
            others are worker processes the whole process shares, started on first use).
            Default None: one per core, as the builds: a round's lowering is most of a warm
            or GPU study's wall time, and the build workers are idle meanwhile. Knob features
            are computed here, whatever this says.
        seed: Seed of every random choice. Default None (unseeded).
    """

    def __init__(
        self,
        template: Template | None = None,
        *,
        cost_model: str = DEFAULT_COST_MODEL,
        feature_set: str | None = None,
        search: str = SEARCHES[0],
        loss: str = LOSSES[0],
        acquisition: str = ACQUISITIONS[0],
        n_models: int = 3,
        n_startup_trials: int = 16,
        batch_size: int = 8,
        candidate_factor: float = 3.0,
        diversity: float | None = None,
        epsilon: float = 0.05,
        n_chains: int = 32,
        anneal_steps: int = 8,
        restart_share: float = 0.5,
        explore_share: float = 0.25,
        explore_distance: int = 3,
        refit_growth: float = 0.05,
        source_studies: Sequence[optuna.Study] | str = (),
        source_half_life: float = 32.0,
        source_weighting: str = SOURCE_WEIGHTINGS[0],
        source_rows: str = SOURCE_ROWS[0],
        source_starts: int = 16,
        source_startup_share: float = 0.5,
        yield_to_design: bool = False,
        drop_outpaced: bool = True,
        keep_start_up_picks: bool = False,
        local_share: float = 0.0,
        screen_share: float = 0.25,
        feature_processes: int | None = None,
        seed: int | None = None,
    ) -> None:
        from tensortune.features import FEATURE_SETS

        if cost_model == "treegru" and feature_set not in (None, "loop-tree"):
            raise ValueError(f"the treegru cost model reads loop trees, not {feature_set!r}")
        if feature_set is not None and feature_set not in FEATURE_SETS:
            raise ValueError(
                f"unknown feature_set {feature_set!r}; choose one of {', '.join(FEATURE_SETS)}"
            )
        for name, count in (
            ("n_startup_trials", n_startup_trials),
            ("source_starts", source_starts),
        ):
            if count < 0:
                raise ValueError(f"{name} must be at least 0, got {count}")
        for name, share in (
            ("source_startup_share", source_startup_share),
            ("local_share", local_share),
        ):
            if not 0 <= share <= 1:
                raise ValueError(f"{name} must be within [0, 1], got {share}")
        if not 0 < screen_share <= 1:
            raise ValueError(f"screen_share must be within (0, 1], got {screen_share}")
        if feature_processes is not None and feature_processes < 1:
            raise ValueError(f"feature_processes must be at least 1, got {feature_processes}")
        if not refit_growth >= 0:
            raise ValueError(f"refit_growth must be at least 0, got {refit_growth}")
        if source_studies != AUTO and (
            isinstance(source_studies, (optuna.Study, str))
            or not all(isinstance(s, optuna.Study) for s in source_studies)
        ):
            raise ValueError(
                f"source_studies must be a sequence of optuna.Study objects or {AUTO!r}"
            )
        #: How each model round searches; its fields are checked when it is made.
        self.settings = RoundSettings(
            loss=loss,
            acquisition=acquisition,
            n_models=n_models,
            batch_size=batch_size,
            candidate_factor=candidate_factor,
            diversity=diversity,
            epsilon=epsilon,
            n_chains=n_chains,
            anneal_steps=anneal_steps,
            restart_share=restart_share,
            explore_share=explore_share,
            explore_distance=explore_distance,
            source_half_life=source_half_life,
            source_weighting=source_weighting,
            source_rows=source_rows,
            cost_model=cost_model,
            search=search,
        )
        self.template = template
        self._feature_choice = feature_set
        self.cost_model = cost_model
        #: The feature set in use: as given, else resolved for the template (see _reset).
        self.feature_set = feature_set or COST_MODELS[cost_model]
        self.n_startup_trials = n_startup_trials
        self.source_startup_share = source_startup_share
        self.yield_to_design = yield_to_design
        self.drop_outpaced = drop_outpaced
        self.keep_start_up_picks = keep_start_up_picks
        self.local_share = local_share
        self.refit_growth = refit_growth
        self.screen_share = screen_share
        self.feature_processes = feature_processes or host_cores()
        #: The prior studies and what the study keeps of them.
        self.warm = WarmStart(source_studies, source_starts)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._random = RandomSampler(seed=seed)
        self._lock = threading.RLock()
        self._workload_key: str | None = None
        self._space: KnobSpace | None = None
        self._extractor: FeatureExtractor | None = None
        # Knob features of the template for the screen (None: no screen), and the configs
        # lowered lately, which it learns from (a cache: a new process starts without).
        self._screen_rows: Callable[[np.ndarray], np.ndarray] | None = None
        self._lowered = np.empty((0, 0), np.int64)
        self._queue: deque[tuple[tuple[int, ...], str, float]] = deque()
        self._startup: np.ndarray | None = None
        self._chains: np.ndarray | None = None
        self._fitted_at = -1
        self._round = 0
        self._model: CostModel | None = None
        self._model_rows = 0  # finished trials the model was last fit on
        # What the sources weighed in all when the model began training (NaN: no sources).
        self._model_start_weight = float("nan")
        # Finished trials' encoded configs (see read_history), for the study they came from.
        self._encoded: dict[int, tuple[int, ...] | None] = {}
        self._encoded_study: tuple[int, int] | None = None
        # The cold twin that proposes a warm study's `local_share` (made on first use).
        self._twin: CostModelSampler | None = None
        #: Wall time per phase of the last model round (for benchmarks and the curious).
        self.last_round_seconds: dict[str, float] = {}
        #: Configs the last model round's searches scored with the model (lowered through TVM
        #: unless its features are knob features), screened ones left out.
        self.last_round_scored = 0
        #: Whether the last model round replaced a model that went on from earlier rounds (a
        #: TreeGRU whose sources had faded, see `fit_cost_model`) with fresh networks.
        self.last_round_restarted = False

    @property
    def source_studies(self) -> list[optuna.Study] | str:
        """The prior studies, or `AUTO` until they are found (`tensortune.tune` sets them)."""
        return self.warm.studies

    @source_studies.setter
    def source_studies(self, studies: list[optuna.Study]) -> None:
        # Other sources, or the same ones grown, are read again at the next model round;
        # dropped ones that have grown enough are judged again, from a warm start-over.
        before = _names(self.warm.studies)
        readmitted = self.warm.use(studies)
        if self._extractor is None:
            return
        template = self._extractor.template
        # A source of another design space joining sources of this one (a model's tasks of
        # one kind, say) makes decision rows incomparable: start over in the feature set a
        # sampler made with these sources would choose. The same sources grown keep their
        # spaces, so their templates (0.1 s each) are not made again every batch.
        joined = _names(studies) != before and not self.warm.dropped
        if readmitted or (joined and self._features_for(template) != self.feature_set):
            self._reset(template)

    @property
    def last_source_weights(self) -> dict[str, float]:
        """Per source workload, the weight of its rows in the last model round."""
        return self.warm.weights

    # -- Optuna's sampler interface ----------------------------------------------------------
    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._random.reseed_rng()

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        template = self._template_for(study)
        return template.distributions() if template is not None else {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        _refuse_multi_objective(study)
        if not search_space:
            return {}
        template = self._template_for(study)
        knobs = {k.name: k.distribution for k in template.knobs} if template else {}
        if any(knobs.get(name) != dist for name, dist in search_space.items()):
            # Not the template's space: sample it independently, as Optuna's samplers do.
            return {
                name: self._random.sample_independent(study, trial, name, dist)
                for name, dist in search_space.items()
            }
        with self._lock:  # held until the config is in storage, where other threads look
            for attempt in range(_CLAIM_ATTEMPTS):
                if attempt:
                    # Processes with one seed draw in lockstep and would collide again: the
                    # trial number sets them apart.
                    self._rng = np.random.default_rng([self.seed or 0, trial.number, attempt])
                indices, source, score = self._next_config(study, trial.number, attempt > 0)
                assert self._space is not None
                config = self._space.decode(indices)
                proposal: dict[str, Any] = {"source": source, "round": self._round}
                if np.isfinite(score):
                    proposal["score"] = round(float(score), 4)
                if self.last_source_weights:  # those of the last round, by source workload
                    proposal["source_weights"] = self.last_source_weights
                if self.last_round_restarted:
                    proposal["model_restarted"] = True
                claim_config(study, trial, config, proposal)
                if not claimed_by_another(study, trial, config):
                    break
        return config

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        _refuse_multi_objective(study)
        if self._space is not None and param_name not in self._space.names():
            warnings.warn(
                f"CostModelSampler samples {param_name!r} independently: it is not a knob of "
                "the study's template.",
                stacklevel=2,
            )
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._random.after_trial(study, trial, state, values)

    # -- proposals ---------------------------------------------------------------------------
    def _template_for(self, study: optuna.Study) -> Template | None:
        if self.template is not None:
            return self.template
        if "workload" not in study.user_attrs:
            return None
        from tensortune.storage import study_space, study_target, study_workload
        from tensortune.templates import template_for

        workload = study_workload(study)
        self.warm.resolve(study, workload)
        key = f"{workload.key} in {study_space(study)}"
        if self._workload_key != key:  # another study: start over
            self._workload_key = key
            self._reset(template_for(workload, study_target(study), study_space(study)))
        return self._extractor.template if self._extractor else None

    def _features_for(self, template: Template, drop_sources: bool = False) -> str:
        """The feature set for `template` with the present sources (none with
        `drop_sources`): the one asked for, else knob features where they fit and no source
        searches another design space, else the cost model's program features."""
        from tensortune.features import knob_features_fit

        if self._feature_choice is not None:
            return self._feature_choice
        # Prior studies of another shape taught the model more through program features:
        # warm proposals for matmul 128 from a 192x96x160 study re-timed at a median 44-56
        # GFLOP/s with curve features against 30 with knob features (16 configs each).
        # Sources of this very design space make the same decisions: their knob rows
        # compare as they are, and nothing need be lowered.
        knob = (
            self.cost_model == "xgb"
            and knob_features_fit(template)
            and (drop_sources or not self.warm.studies or self.warm.share_space(template.knobs))
        )
        return "knob" if knob else COST_MODELS[self.cost_model]

    def _reset(self, template: Template, drop_sources: bool = False) -> None:
        """Start over on `template`; with `drop_sources`, as a cold study (the sources all
        weigh nothing: the rest of the start-up design, the cold feature set)."""
        from tensortune.features import FeatureExtractor, knob_features, knob_features_fit

        self.feature_set = self._features_for(template, drop_sources)
        self.settings = dataclasses.replace(
            self.settings, evolution=evolve_sizes(self.feature_set == "knob")
        )
        self._space = KnobSpace(template.knobs, template.check)
        self._encoded.clear()
        self._extractor = FeatureExtractor(
            template, self.feature_set, processes=self.feature_processes
        )
        lowering = self.feature_set != "knob" and knob_features_fit(template)
        self._screen_rows = knob_features(template).from_indices if lowering else None
        self._lowered = np.empty((0, len(template.knobs)), np.int64)
        self._queue.clear()
        self._startup = None
        self._chains = None
        self._fitted_at = -1
        self._model = None
        self._model_rows = 0
        self._model_start_weight = float("nan")
        self._twin = None
        self.warm.reset(drop=drop_sources)
        if drop_sources and self.warm.drops == 1:
            # Go on as the cold study of this seed would, from its random state at the start.
            # The configs the sources chose stay in the data: they are the target's own
            # measurements, whoever picked them.
            self._rng = np.random.default_rng(self.seed)

    def _next_config(
        self, study: optuna.Study, number: int, fresh: bool = False
    ) -> tuple[tuple[int, ...], str, float]:
        """The config for trial `number`, where it came from, and its acquisition score."""
        if self._space is None:
            assert self.template is not None
            self.warm.resolve(study, self.template.workload)
            self._reset(self.template)
        assert self._space is not None
        if self._encoded_study != (id(study._storage), study._study_id):
            self._encoded_study = (id(study._storage), study._study_id)
            self._encoded.clear()
        # A study that dropped its sources learns, as the cold study of its seed would, only
        # from configs they did not steer: those pull its model back to where they led.
        leave_out = self._steered_after_start_up if self.warm.dropped else None
        history = read_history(
            study, self._space, fresh=fresh, memo=self._encoded, leave_out=leave_out
        )
        n_measured = int(np.isfinite(history.values).sum())
        assert self._extractor is not None
        rows = self.warm.load(
            study,
            self.feature_set,
            self._extractor.length,
            self.feature_processes,
            self._extractor.template.knobs,
        )
        warm = rows is not None
        if warm and self._outpaced(history, n_measured):
            # The sources' picks lost to the cold design's: go on as the cold study would.
            # What follows is a round of its own, so the last one keeps the weights it had.
            assert self._extractor is not None
            self._reset(self._extractor.template, drop_sources=True)
            self._round += 1
            return self._next_config(study, number, fresh)
        if not warm and (n_measured < 2 or self._in_start_up(history, n_measured)):
            return self._startup_config(history.taken), "startup", float("nan")
        if warm and n_measured < self.n_startup_trials and not self._model_slot(number, history):
            # Part of a warm start's early trials are the cold start's: configs the sources
            # did not choose, on which their ranking can be judged fairly.
            return self._startup_config(history.taken), "startup", float("nan")
        if warm and n_measured >= self.n_startup_trials and self._local_slot(number):
            indices, source, score = self._local_twin()._next_config(study, number, fresh)
            return indices, f"local {source}", score
        stale = history.n_finished >= self._fitted_at + self.settings.batch_size
        while True:
            if not self._queue or stale:
                self._queue.clear()
                self._propose(history)
                stale = False
                if self.warm.silent():
                    # Every source ranks the study's own configs no better than chance, or
                    # reversed: go on as a cold study would.
                    assert self._extractor is not None
                    self._reset(self._extractor.template, drop_sources=True)
                    return self._next_config(study, number, fresh)
            if not self._queue:
                return self._random_config(history.taken), "random", float("nan")
            indices, source, score = self._queue.popleft()
            if indices not in history.taken:
                return indices, source, score

    def _in_start_up(self, history: History, n_measured: int) -> bool:
        """Whether a study without sources still takes its start-up design: until it has
        measured `n_startup_trials` configs, or, once it dropped its sources, until it has
        taken every point of the design. The sources chose part of its first configs, which
        its model leaves out: it finishes the design first, as the cold study of its seed
        would have, and then its model proposes, even where the last points are still being
        measured (a batch asks before they finish; counting them as missing would fill the
        batch with random configs and put off the first model round)."""
        if self.warm.dropped:
            return self._design_point(history.taken) is not None
        return n_measured < self.n_startup_trials

    def _model_slot(self, number: int, history: History) -> bool:
        """Whether early trial `number` of a warm start is the source-trained model's: one of
        its share, unless it yields to a design that leads (`yield_to_design`)."""
        if not _in_share(number, self.source_startup_share):
            return False
        return not (self.yield_to_design and design_leads(history, self._design()))

    def _steered_after_start_up(self, trial: FrozenTrial) -> bool:
        """Whether a dropped study's model leaves `trial` out: steered by the sources, and
        with `keep_start_up_picks` only where it came after the start-up."""
        if self.keep_start_up_picks and trial.number < self.n_startup_trials:
            return False
        return steered_by_sources(trial)

    def _outpaced(self, history: History, n_measured: int) -> bool:
        """Whether the sources' start-up picks lost to the design's (see `drop_outpaced`),
        judged on the study's first `n_startup_trials` configs: a study resumed past its
        start-up drops them again where it did before. Sources that come back after a drop
        (`WarmStart.use`) are left to their weighting."""
        if not self.drop_outpaced or self.warm.drops or n_measured < MIN_EVIDENCE:
            return False
        first = self.n_startup_trials  # a slice stops at the end of a shorter history
        start_up = dataclasses.replace(
            history, configs=history.configs[:first], values=history.values[:first]
        )
        return design_leads(start_up, self._design())

    def _local_slot(self, number: int) -> bool:
        """Whether trial `number` of a warm study past its start-up is the cold twin's."""
        return _in_share(number, self.local_share)

    def _local_twin(self) -> CostModelSampler:
        """The cold twin of this sampler (see `local_share`), made on first use."""
        if self._twin is None:
            assert self._extractor is not None
            s = self.settings
            self._twin = CostModelSampler(
                self._extractor.template,
                cost_model=self.cost_model,
                feature_set=self._feature_choice,
                search=s.search,
                loss=s.loss,
                acquisition=s.acquisition,
                n_models=s.n_models,
                n_startup_trials=self.n_startup_trials,
                batch_size=s.batch_size,
                candidate_factor=s.candidate_factor,
                diversity=s.diversity,
                epsilon=s.epsilon,
                n_chains=s.n_chains,
                anneal_steps=s.anneal_steps,
                restart_share=s.restart_share,
                explore_share=s.explore_share,
                explore_distance=s.explore_distance,
                refit_growth=self.refit_growth,
                screen_share=self.screen_share,
                feature_processes=self.feature_processes,
                seed=self.seed,
            )
        return self._twin

    def _propose(self, history: History) -> None:
        assert self._space is not None and self._extractor is not None
        space, extractor = self._space, self._extractor
        grown = history.n_finished - self._model_rows
        # Due by growth; `propose_round` also fits without a model, or with sources.
        refit = grown >= max(self.settings.batch_size, self.refit_growth * self._model_rows)
        screen = self._screen()

        def featurize(configs: np.ndarray) -> np.ndarray:
            if extractor.knob is not None:  # straight from the indices: no dicts for 10^4 rows
                return extractor.knob.from_indices(configs)
            return extractor([space.decode(row) for row in configs])

        result = propose_round(
            history,
            featurize,
            space.sizes,
            self.settings,
            self._chains,
            self._rng,
            prior=self.warm.rows,
            prior_starts=self.warm.starts(space),
            model=self._model,
            judges=self._source_judges(),
            refit=refit,
            screen=screen,
            start_weight=self._model_start_weight,
        )
        self.last_round_scored = len(result.lowered)
        if screen is not None:  # the pool only feeds a screen
            self._lowered = recent_pool(self._lowered, [history.configs, result.lowered])
        if result.fitted:
            self._model_rows = history.n_finished
        self.warm.record(result.source_weights, result.source_faded)
        self.last_round_restarted = result.restarted
        self._model = result.model
        self._model_start_weight = result.start_weight
        self._chains = result.states
        self._fitted_at = history.n_finished
        self._round += 1
        self.last_round_seconds = result.seconds
        for row, source, score in zip(result.configs, result.sources, result.scores, strict=True):
            self._queue.append((tuple(int(v) for v in row), source, float(score)))

    def _screen(self) -> Screen | None:
        """The round's knob-feature screen, where candidates are lowered and it can be had."""
        if self._screen_rows is None or self.screen_share >= 1:
            return None
        return Screen(self._screen_rows, self._lowered, self.screen_share)

    def _source_judges(self) -> list[CostModel | None]:
        """The judges every weighting but ``"decay"`` ranks the study's own configs with (see
        `WarmStart.judges`); none for ``"decay"``."""
        if self.settings.source_weighting == "decay":
            return []
        settings, seed = self.settings, self.seed or 0
        # One member each: a judge only orders configs, it needs no spread.
        return self.warm.judges(
            lambda: make_cost_model(settings.cost_model, settings.loss, 1, seed)
        )

    def _design(self) -> np.ndarray:
        """The seeded space-filling start-up design (`tensortune.search.space_filling`)."""
        assert self._space is not None
        if self._startup is None:
            n = max(self.n_startup_trials, 2)
            self._startup = space_filling(self._space.sizes, n, np.random.default_rng(self.seed))
        return self._startup

    def _design_point(self, taken: set[tuple[int, ...]]) -> tuple[int, ...] | None:
        """The first point of the start-up design not taken yet; None once all are."""
        for row in self._design().tolist():
            if tuple(row) not in taken:
                return tuple(row)
        return None

    def _startup_config(self, taken: set[tuple[int, ...]]) -> tuple[int, ...]:
        """The first point of a seeded space-filling design (`tensortune.search.space_filling`)
        not taken yet: the start-up trials cover every knob's values evenly, where uniform
        draws leave gaps that one seed's luck decides. Random once the design is used up."""
        point = self._design_point(taken)
        return point if point is not None else self._random_config(taken)

    def _random_config(self, taken: set[tuple[int, ...]]) -> tuple[int, ...]:
        assert self._space is not None
        sizes = self._space.sizes
        found = unseen_random_configs(sizes, 1, self._rng, taken, per_round=1, max_rounds=999)
        if len(found):
            return tuple(int(v) for v in found[0])
        # A space this crowded has nothing new left to offer: the 1000th draw, taken or not.
        return tuple(int(v) for v in random_configs(sizes, 1, self._rng)[0])


def _in_share(number: int, share: float) -> bool:
    """Whether trial `number` is one of a `share` of trials spread evenly over the trial
    numbers: trial 0 is for any share above 0, none for 0, all for 1."""
    return math.ceil((number + 1) * share) > math.ceil(number * share)


#: Tries at a config no other process claimed meanwhile before a duplicate is accepted.
_CLAIM_ATTEMPTS = 20


def _refuse_multi_objective(study: optuna.Study) -> None:
    if len(study.directions) > 1:
        raise ValueError("CostModelSampler supports single-objective studies only.")


def _names(studies: Sequence[optuna.Study] | str) -> list[str]:
    """The names of `studies`, in order (none for `AUTO`, not yet resolved)."""
    return [] if isinstance(studies, str) else [s.study_name for s in studies]

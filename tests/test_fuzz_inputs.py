"""Bad input, fuzzed (hypothesis): shapes, targets, knob values, storage URLs, study names and
workload registrations each end in one clear error, and nothing is left half-written.

Every CLI case here is built to be refused before any kernel is built, so the properties run
hundreds of examples in seconds: a value that happens to be valid is paired with another input
that is not and is checked later (``--trials 0``, a blank study name), and the error must then
name that one.
"""

from __future__ import annotations

import json
import os
import string

import numpy as np
import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune
from tensortune import TensortuneError
from tensortune.cli import main
from tensortune.target import target_spec
from tensortune.templates import CpuTemplate, InvalidConfig
from tensortune.workloads import _registry, parse_shape

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Inputs tried, per property; printed when the module's tests are done.
TRIED: dict[str, int] = {}


def _count(name: str) -> None:
    TRIED[name] = TRIED.get(name, 0) + 1


@pytest.fixture(scope="module", autouse=True)
def _report_inputs_tried():
    yield
    print(f"\nfuzzed inputs tried: {TRIED} (total {sum(TRIED.values())})")


def _refused(argv: list[str], folder: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI on `argv` in `folder`: exit 2, one stderr line, no file written.

    Values go as ``--option=VALUE``: argparse takes a separate ``-185`` for an option."""
    before = sorted(os.listdir(folder))
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, (argv, err)
    assert sorted(os.listdir(folder)) == before, argv
    return err


# A shape: any text, or lists of integers that may be zero, negative or not integers at all.
_numbers = st.integers(min_value=-(2**40), max_value=2**40)
_shapes = st.one_of(
    st.text(max_size=30),
    st.lists(_numbers, min_size=0, max_size=5).map(lambda xs: ",".join(map(str, xs))),
    st.lists(st.tuples(st.sampled_from("MNKBXq"), _numbers), max_size=4).map(
        lambda kv: ",".join(f"{k}={v}" for k, v in kv)
    ),
)


@FUZZ
@given(op=st.sampled_from(["matmul", "conv2d", "depthwise_conv2d", "nosuchop"]), shape=_shapes)
def test_fuzzed_shapes(tmp_path, capsys, op, shape):
    _count("shapes")
    argv = ["tune", op, f"--shape={shape}", "--trials", "0", "--no-progress"]
    err = _refused(argv, str(tmp_path), capsys)
    try:
        parse_shape(op, shape)
    except TensortuneError as refusal:
        assert str(refusal) in err  # the shape's own reason, not another
    else:
        assert "n_trials must be at least 1" in err


_targets = st.one_of(
    st.text(max_size=40),
    st.builds(lambda k, rest: f"{k} {rest}", st.sampled_from(["llvm", "cuda", "c"]), st.text()),
    st.dictionaries(
        st.sampled_from(["kind", "mcpu", "num-cores", "bogus", "arch"]),
        st.one_of(st.text(max_size=8), st.integers(-4, 64), st.none()),
    ).map(json.dumps),
)


@FUZZ
@given(target=_targets)
def test_fuzzed_targets(tmp_path, capsys, target):
    _count("targets")
    # A blank study name is refused after the target is checked, before any storage opens.
    argv = ["tune", "matmul", "--shape", "8,8,8", f"--target={target}", "--study= "]
    err = _refused(argv, str(tmp_path), capsys)
    try:
        target_spec(target)
    except TensortuneError as refusal:
        assert str(refusal) in err
    else:
        assert "study name must not be empty" in err


@FUZZ
@given(
    trials=st.integers(-(2**31), 0) | st.just(1),
    batch=st.integers(-(2**31), 0) | st.just(1),
    repeat=st.integers(-5, 0) | st.just(1),
    timeout=st.sampled_from(["0", "-1", "nan", "inf", "x", "1"]),
)
def test_fuzzed_numbers(tmp_path, capsys, trials, batch, repeat, timeout):
    _count("numbers")
    if trials == batch == repeat == 1 and timeout in ("1", "inf"):
        trials = 0  # keep every example a refusal: nothing is tuned here
    argv = ["tune", "matmul", "--shape", "8,8,8", f"--trials={trials}", f"--batch-size={batch}"]
    argv += [f"--repeat={repeat}", f"--run-timeout={timeout}"]
    if timeout == "x":  # argparse's own refusal: usage plus one error line, exit 2
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert "invalid float value" in capsys.readouterr().err
        return
    _refused(argv, str(tmp_path), capsys)


# Server URLs only ever name a closed port on this machine: a fuzzer must not reach out.
_urls = st.one_of(
    st.text(max_size=40).filter(lambda u: "://" not in u),
    st.builds(
        lambda scheme, rest: f"{scheme}://{rest}",
        st.sampled_from(["sqlite", "nosuchdb", "http", ""]),
        st.text(alphabet=string.printable, max_size=30).filter(lambda r: "@" not in r),
    ),
    st.builds(
        lambda scheme, rest: f"{scheme}://user@127.0.0.1:1/{rest}",
        st.sampled_from(["postgresql", "mysql"]),
        st.text(alphabet=string.ascii_letters + string.digits + "_-", max_size=12),
    ),
    st.text(alphabet=string.ascii_letters + "/._-", max_size=20).map(
        lambda p: f"sqlite:///missing-dir/{p}.db"
    ),
)


@FUZZ
@given(url=_urls)
def test_fuzzed_storage_urls(tmp_path, capsys, url):
    _count("storage URLs")
    # A read-only command: an unusable URL, a file that is not there and a storage with no such
    # study all end in one line, and no database file appears.
    err = _refused(["best", f"--storage={url}", "--study", "s"], str(tmp_path), capsys)
    assert any(
        words in err
        for words in ("storage", "no study named", "malformed", "does not exist", "cannot open")
    ), err


@pytest.fixture(scope="module")
def existing_storage(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('names') / 'studies.db'}"
    optuna.create_study(study_name="foreign", storage=url)
    return url


@FUZZ
@given(name=st.text(max_size=40))
def test_fuzzed_study_names(tmp_path, capsys, existing_storage, name):
    _count("study names")
    before = optuna.study.get_all_study_names(existing_storage)
    for command in (["best"], ["export", "-o", str(tmp_path / "out")]):
        err = _refused([*command, "--storage", existing_storage, f"--study={name}"], ".", capsys)
        assert repr(name) in err or "not made by tensortune" in err, err
    assert not (tmp_path / "out").exists()
    if not name.strip():  # tune() refuses a blank name before it opens the storage
        with pytest.raises(TensortuneError, match="study name must not be empty"):
            tensortune.tune(
                "matmul", shape=dict(M=8, N=8, K=8), storage=existing_storage, study_name=name
            )
    assert optuna.study.get_all_study_names(existing_storage) == before


_TEMPLATE = CpuTemplate(tensortune.get_workload("matmul", M=12, N=8, K=6))
_value = st.one_of(
    st.integers(-100, 1000),
    st.text(alphabet="0123456789x SRij", max_size=12),
    st.none(),
    st.floats(allow_nan=True),
)


@FUZZ
@given(data=st.data())
def test_fuzzed_knob_values(data):
    _count("knob values")
    # Values of each knob's space, then up to two of them replaced by anything at all: a third
    # of the configs reach TVM's scheduler whole.
    config = {k.name: data.draw(st.sampled_from(k.choices), label=k.name) for k in _TEMPLATE.knobs}
    for name in data.draw(st.lists(st.sampled_from(sorted(config)), max_size=2), label="bad"):
        config[name] = data.draw(_value, label=name)
    if data.draw(st.booleans(), label="drop a knob"):
        config.pop(data.draw(st.sampled_from(sorted(config))))
    if data.draw(st.booleans(), label="extra knob"):
        config["bogus"] = 1
    try:
        sch = _TEMPLATE.apply(config)
    except ValueError as err:  # a value outside the space, or InvalidConfig from TVM
        assert str(err).strip() and "\n" not in str(err).strip()
        assert isinstance(err, InvalidConfig) or "knob" in str(err)
        return
    # Accepted: every value was in its knob's space and the schedule is a real program.
    # (Keys that are no knob are left out, as `CpuTemplate.check` documents.)
    for knob in _TEMPLATE.knobs:
        assert config[knob.name] in knob.choices
    assert sch.mod is not None


_names = st.one_of(st.text(max_size=12), st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True))


@FUZZ
@given(
    name=_names,
    reference=st.sampled_from([lambda x: x + 1, None, 3, "np.sum"]),
    star=st.booleans(),
)
def test_fuzzed_workload_registrations(name, reference, star):
    _count("workload registrations")
    from tvm import te

    def compute(n: int = 4):
        x = te.placeholder((n,), "float32", name="x")
        return [x, te.compute((n,), lambda i: x[i] + 1, name="y")]

    def compute_star(*shape: int):
        return compute(*shape)

    before = dict(_registry._REGISTRY)
    valid = (
        bool(name)
        and name.replace("_", "").isalnum()
        and name not in before
        and callable(reference)
        and not star
    )
    try:
        tensortune.register_workload(name, reference=reference)(compute_star if star else compute)
    except TensortuneError as err:
        assert not valid and "\n" not in str(err)
        assert before == _registry._REGISTRY  # a refusal registers nothing
        return
    try:
        assert valid, name
        workload = tensortune.get_workload(name, n=4)
        (out,) = workload.reference(workload.random_inputs(seed=0))
        np.testing.assert_allclose(out, workload.random_inputs(seed=0)[0] + 1, rtol=1e-6)
    finally:
        _registry._REGISTRY.pop(name, None)

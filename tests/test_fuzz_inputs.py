"""Bad input, fuzzed (hypothesis): shapes, targets, knob values, storage URLs, study names,
workload registrations, seeds, artifact folders, dashboard ports, workload sizes and whole
argument lists each end in one clear error, and nothing is left half-written.

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


def _usage_error(argv: list[str], folder: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Like `_refused`, for a refusal by argparse: it exits (status 2) instead of returning."""
    before = sorted(os.listdir(folder))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2, argv
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("tensortune: error: ") and "\n" not in err, (argv, err)
    assert captured.out == "" and sorted(os.listdir(folder)) == before, argv
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
        st.sampled_from(["kind", "mcpu", "num-cores", "bogus", "arch", "mtriple"]),
        st.one_of(
            st.text(max_size=8),
            st.integers(-4, 64),
            st.none(),
            # Names LLVM knows, or nearly: they pass TVM's parsing and only LLVM can tell.
            st.sampled_from(["llvm", "znver4", "Znver4", "skylake-avx512", "cortex-a72"]),
            st.sampled_from(["x86_64-linux-gnu", "aarch64-linux-gnu", "bogus-x", "generic"]),
        ),
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
    if timeout == "x":  # argparse's own refusal, in one line too
        err = _usage_error(argv, str(tmp_path), capsys)
        assert "argument --run-timeout: invalid float value: 'x'" in err
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
    # In-memory SQLite: it opens, and every trial would vanish with the process.
    st.sampled_from(
        [
            "sqlite://",
            "sqlite:///",
            "sqlite:///:memory:",
            "sqlite+pysqlite:///:memory:",
            "sqlite:///file::memory:?cache=shared",
            "sqlite:///file:x?mode=memory&uri=true",
        ]
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


@pytest.mark.slow
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


# Inputs that parse and used to fail late (after a study was created, in a worker) or never.
# Each property pairs them with a later refusal, so that an input let through is caught by
# the error naming that one instead.


@FUZZ
@given(
    seed=st.integers(-(2**70), 2**70) | st.sampled_from([-1, 0, 2**32 - 1, 2**32, 2**64]),
    sampler=st.sampled_from(["costmodel", "tpe", "random"]),
)
def test_fuzzed_seeds(tmp_path, capsys, seed, sampler):
    _count("seeds")
    argv = ["tune", "matmul", "--shape=8,8,8", f"--seed={seed}", f"--sampler={sampler}"]
    err = _refused([*argv, "--study= "], str(tmp_path), capsys)
    if 0 <= seed < 2**32:
        assert "study name must not be empty" in err
    else:
        assert f"seed must be an integer from 0 to 2**32 - 1, got {seed}" in err


@FUZZ
@given(name=st.text(max_size=30).filter(lambda n: n.strip()))
def test_fuzzed_study_names_for_tune(tmp_path, capsys, name):
    _count("tune study names")
    # A printable name passes and the artifact folder, a file, is refused next.
    taken = tmp_path / "taken"
    taken.write_text("")
    storage = f"sqlite:///{tmp_path / 'names.db'}"
    argv = ["tune", "matmul", "--shape=8,8,8", f"--storage={storage}", f"--study={name}"]
    err = _refused([*argv, f"--artifact-dir={taken}"], str(tmp_path), capsys)
    if name.isprintable():
        assert "it is a file" in err
    else:
        assert f"study name {name!r} holds a control character" in err


_component = st.text(alphabet=string.ascii_letters + string.digits + "_- ", min_size=1, max_size=8)


@FUZZ
@given(
    base=st.sampled_from(["file", "folder", "missing", "/sys"]),
    tail=st.lists(_component.map(lambda c: f"tt-{c}"), max_size=3),
)
def test_fuzzed_artifact_dirs(tmp_path, capsys, base, tail):
    _count("artifact folders")
    (tmp_path / "taken").write_text("")
    (tmp_path / "folder").mkdir(exist_ok=True)
    root = {
        "file": str(tmp_path / "taken"),
        "folder": str(tmp_path / "folder"),
        "missing": str(tmp_path / "missing"),
        "/sys": "/sys",
    }[base]
    folder = os.path.join(root, *tail)
    # A usable folder passes, and the in-memory storage is refused next: nothing is created.
    argv = ["tune", "matmul", "--shape=8,8,8", "--storage=sqlite:///:memory:"]
    err = _refused([*argv, f"--artifact-dir={folder}"], str(tmp_path), capsys)
    assert os.listdir(tmp_path / "folder") == []
    if base == "file":
        assert ("it is a file" if not tail else f"{tmp_path / 'taken'} is a file") in err
    elif base == "/sys":
        assert "cannot write in /sys" in err
    else:
        assert "is in memory" in err


@FUZZ
@given(port=st.integers(-(2**40), 2**40) | st.sampled_from([-1, 0, 1, 8080, 65535, 65536]))
def test_fuzzed_dashboard_ports(tmp_path, capsys, port):
    _count("dashboard ports")
    # A port in range passes, and the storage, missing, is refused: no artifacts folder.
    argv = ["dashboard", f"--storage=sqlite:///{tmp_path / 'none.db'}", f"--port={port}"]
    err = _refused(argv, str(tmp_path), capsys)
    if 1 <= port <= 65535:
        assert "none.db does not exist" in err
    else:
        assert f"port must be an integer from 1 to 65535, got {port}" in err


_extent = st.integers(0, 18).map(lambda e: 2**e) | st.integers(1, 300_000)


@FUZZ
@given(op=st.sampled_from(["matmul", "batch_matmul"]), data=st.data())
def test_fuzzed_memory_sizes(tmp_path, capsys, op, data):
    _count("memory sizes")
    dims = [data.draw(_extent, label=p) for p in ("B", "M", "N", "K")[op == "matmul" :]]
    batch, m, n, k = ([1] if op == "matmul" else []) + dims
    need = 4 * batch * (m * k + k * n + m * n)  # float32 A, B and C
    budget = 0.25 * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    shape = ",".join(map(str, dims))
    err = _refused(["tune", op, f"--shape={shape}", "--trials=0"], str(tmp_path), capsys)
    if need > budget:
        assert f"its tensors need {need / 2**30:.1f} GiB of memory" in err, (need, err)
    else:
        assert "n_trials must be at least 1" in err


_OPTIONS = ["--shape", "--target", "--trials", "--total-trials", "--storage", "--study"]
_OPTIONS += ["--sampler", "--acquisition", "--seed", "--batch-size", "--repeat", "--port"]
_OPTIONS += ["--run-timeout", "--artifact-dir", "--transfer-from", "--no-progress", "--bogus"]
_token = st.one_of(
    st.sampled_from(_OPTIONS),
    st.sampled_from(["matmul", "8,8,8", "-1", "0", "abc", "llvm", "tpe", "ei", "x\ny", "--"]),
    st.text(max_size=10),
).filter(lambda t: not t.startswith(("-h", "--h")))  # --help (or a prefix) prints help


@FUZZ
@given(tokens=st.lists(_token, max_size=8))
def test_fuzzed_argv(tmp_path, capsys, tokens):
    _count("argv")
    # Whatever the arguments, `tune` ends in one line and status 2: argparse's refusal, or
    # (where they parse) the first bad value, at the latest --trials=0.
    argv = ["tune", *tokens, "--trials=0"]
    try:
        err = _refused(argv, str(tmp_path), capsys)
    except SystemExit:  # argparse refused them: check that refusal as a user sees it
        capsys.readouterr()
        err = _usage_error(argv, str(tmp_path), capsys)
    # (Both helpers also check the status, the single line and that nothing was written.)
    assert err.startswith("tensortune: error: ") and "\n" not in err, (argv, err)

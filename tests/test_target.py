"""The host target: its CPU's name, less what the machine does not offer."""

from __future__ import annotations

import subprocess
import sys

from tensortune.target import host_missing_features, target_spec

# /proc/cpuinfo's spelling of Zen 4's AVX-512 sets (Linux writes some with an underscore).
ZEN4_AVX512 = (
    "avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi "
    "avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq"
)


def test_a_cpu_named_for_sets_the_machine_hides_builds_without_them(tmp_path):
    guest = tmp_path / "guest"
    guest.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2\n")
    missing = host_missing_features("znver4", str(guest))
    assert "-avx512f" in missing and "-avx512vnni" in missing
    assert not {"-avx", "-avx2", "-fma", "-f16c"} & set(missing)
    full = tmp_path / "full"
    full.write_text(f"flags\t\t: fpu sse2 avx avx2 fma f16c {ZEN4_AVX512}\n")
    assert host_missing_features("znver4", str(full)) == []
    assert host_missing_features("znver4", str(tmp_path / "absent")) == []
    # A CPU named by the user is taken as given: it may be another machine's.
    given = target_spec({"kind": "llvm", "mcpu": "znver4"})
    assert "mattr" not in given


def test_a_kernel_built_for_this_machine_runs_here():
    # In a child: a kernel with an instruction the CPU lacks kills its process.
    code = """
import numpy as np, tvm
from tvm import te
from tensortune.target import make_target, target_spec
a = te.placeholder((4096,), name="a")
b = te.compute((4096,), lambda i: a[i] * 2.0 + 1.0, name="b")
sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
(loop,) = sch.get_loops(sch.get_sblock("b"))
sch.vectorize(sch.split(loop, [None, 16])[1])
lib = tvm.compile(sch.mod, target=make_target(target_spec("llvm")))
x = tvm.runtime.tensor(np.ones(4096, "float32"))
y = tvm.runtime.tensor(np.zeros(4096, "float32"))
lib(x, y)
assert (y.numpy() == 3.0).all()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])

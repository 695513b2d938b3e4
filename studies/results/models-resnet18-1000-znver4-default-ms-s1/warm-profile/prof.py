"""Where a warm-started batch's time goes: 100 more trials (to 1100) on a copy of seed 1's
studies, under cProfile (the main process; builds and timings run in worker processes).

    python prof.py warm W/resnet18-shipped-winograd.db
    python prof.py cold W/resnet18-tensortune-winograd-channels-last-prepacked.db
"""

import cProfile
import pstats
import shutil
import sys
import time

sys.path.insert(0, "/work/t2/studies")  # the clone's studies/, for model_zoo
import model_zoo

from tensortune.model import from_torch, tune_model

kind, src = sys.argv[1], sys.argv[2]
db = f"/work/prof/{kind}.db"
shutil.copy(src, db)
net, example = model_zoo.model("resnet18")
program = from_torch(net, example, name="resnet18")
prof = cProfile.Profile()
start = time.perf_counter()
prof.enable()
tune_model(program, 1100, "llvm", storage=f"sqlite:///{db}", seed=1, warm_start=(kind == "warm"))
prof.disable()
print(kind, "seconds", round(time.perf_counter() - start, 1))
stats = pstats.Stats(prof).sort_stats("cumulative")
stats.dump_stats(f"/work/prof/{kind}.prof")
stats.print_stats(45)

"""What checking the state every step costs: `StepRunner.state_sum` (the sum over parameters,
buffers and optimizer state) against one whole training step of the same model, side by side.

    OMP_NUM_THREADS=1 python benchmarks/state_check.py [--repeats 20]

For lenet-mnist (LeNet, DATE over RMSprop, micro-batch 128) and ResNet-50 (DATE over SGD with
momentum, batch 8 of 224×224 images on the CPU): the median time of a step (forward, backward,
optimizer) and of the check, alternating; the ratio is what the per-step check adds to a step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from date_engine.optim import DATE
from date_engine.recipes import get_recipe
from date_engine.train.runtime import Runtime
from date_engine.train.step import StepRunner


def case(name: str):
    if name == "lenet-mnist":
        from date_engine.models.lenet import LeNet

        model = LeNet()
        opt = DATE(torch.optim.RMSprop(model.named_parameters(), lr=1e-3))
        x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    else:
        from date_engine.models.resnet import resnet50

        model = resnet50()
        opt = DATE(torch.optim.SGD(model.named_parameters(), lr=0.1, momentum=0.9))
        x, y = torch.randn(8, 3, 224, 224), torch.randint(0, 1000, (8,))
    return model, opt, x, y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rt = Runtime(0, 1, 0, torch.device("cpu"), None, "fp32", False, [])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.repeats} "
          "alternating repeats, medians")
    for name in ("lenet-mnist", "resnet50"):
        model, opt, x, y = case(name)
        runner = StepRunner(model, model, opt, None, get_recipe("lenet-digits"), None, rt, 1)
        step_s, check_s = [], []
        for i in range(args.repeats + 2):
            began = time.perf_counter()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            middle = time.perf_counter()
            float(runner.state_sum())
            done = time.perf_counter()
            if i >= 2:  # the first steps create the optimizer state
                step_s.append(middle - began)
                check_s.append(done - middle)
        step, check = statistics.median(step_s), statistics.median(check_s)
        print(f"{name:12s} step {1e3 * step:9.2f} ms   check {1e3 * check:7.3f} ms   "
              f"= {100 * check / step:.2f}% of a step")


if __name__ == "__main__":
    main()

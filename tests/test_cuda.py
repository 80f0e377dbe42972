"""The CUDA paths: the device, bf16 autocast, fp16 with its GradScaler, DATE's step on the GPU
against the same step on the CPU, and a checkpoint written on the GPU read on the CPU.

They run where a GPU is (`bash benchmarks/gpu_check.sh` runs them first, then trains end to end);
on a machine without CUDA each is skipped with one line saying so.
"""

from __future__ import annotations

import pytest
import torch

from date_engine.api import baseline, optimizer_for, plan_for
from tests.bounds import close_within

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA device here: run bash benchmarks/gpu_check.sh on a GPU"),
]

OPTIMIZERS = {  # catalog name: (η0, options)
    "momentum": (0.05, {}),
    "adam": (1e-3, {}),
    "adamw": (1e-3, {"weight_decay": 0.01}),
    "rmsprop": (1e-3, {}),
    "lars": (0.05, {}),
    "lamb": (1e-3, {}),
}


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def _plan(name: str):
    lr, options = OPTIMIZERS[name]
    layerwise = {"layer_ratio": {"mode": "off"}} if name in ("lars", "lamb") else None
    spec = baseline(batch_size=32, lr=lr, warmup_epochs=0.0, iterations=100, dataset_size=3200,
                    optimizer=name, date=layerwise, **options)
    return plan_for(spec, 256)


def test_the_runtime_takes_the_gpu_and_its_precisions():
    from date_engine.train.runtime import setup, teardown

    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        rt = setup(precision=precision)
        try:
            assert rt.device.type == "cuda" and rt.precision == precision and not rt.notes
            layer = torch.nn.Linear(8, 8).to(rt.device)
            with rt.autocast():
                assert layer(torch.randn(4, 8, device=rt.device)).dtype == dtype
            assert (rt.grad_scaler() is not None) == (precision == "fp16")
        finally:
            teardown(rt)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_date_steps_on_the_gpu_as_on_the_cpu(name):
    """Five steps of the plan's optimizer (DATE's ratios over the base, fused where torch has it
    on each device) from the same weights and gradients end where the CPU's end."""
    run = _plan(name)
    models = {device: _model().to(device) for device in ("cpu", "cuda")}
    optimizers = {device: optimizer_for(m, run) for device, m in models.items()}
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=generator) * 1e-2
                 for p in models["cpu"].parameters()]
        for device, model in models.items():
            for p, g in zip(model.parameters(), grads):
                p.grad = g.to(device)
            optimizers[device].step()
    largest = max(p.numel() for p in models["cpu"].parameters())
    for a, b in zip(models["cpu"].parameters(), models["cuda"].parameters()):
        # 5 steps, each a layer's two norms (n + 1 roundings each, in the device's order), the
        # ratio (6) and the base's update and stores (18)
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **close_within(
            torch.float32, 5 * (2 * (largest + 1) + 24), a.detach().abs().max().item()))


def test_fp16_with_its_grad_scaler_trains():
    """fp16 autocast with the GradScaler: steps are taken (the scale finite, the loss falling)."""
    from date_engine.train.runtime import setup, teardown

    rt = setup(precision="fp16")
    try:
        model = _model().to(rt.device)
        optimizer = optimizer_for(model, _plan("adamw"))
        scaler = rt.grad_scaler()
        x = torch.randn(256, 32, device=rt.device)
        y = torch.randint(0, 10, (256,), device=rt.device)
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            with rt.autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        assert torch.isfinite(torch.tensor(scaler.get_scale()))
        assert losses[-1] < losses[0]
    finally:
        teardown(rt)


def test_a_checkpoint_written_on_the_gpu_is_read_on_the_cpu(tmp_path):
    """The trainer's atomic checkpoint of a GPU model and optimizer, read back as a CPU run reads
    it (map_location cpu), loads into a CPU model and optimizer."""
    from date_engine.runfolder import RunFolder
    from date_engine.train import checkpoint as ckpt

    run = _plan("adam")
    model = _model().cuda()
    optimizer = optimizer_for(model, run)
    model(torch.randn(4, 32, device="cuda")).sum().backward()
    optimizer.step()
    payload = {"format": ckpt.FORMAT, "step": 1, "model": model.state_dict(),
               "optimizer": optimizer.state_dict(), "plan": {}, "spec_fingerprint": "x",
               "ranks": [{"rng": ckpt.capture_rng()}]}
    folder = RunFolder(tmp_path)
    ckpt.save_atomic(folder, 1, payload, keep=1)
    found = ckpt.newest_valid(folder)
    assert found is not None and found.payload["step"] == 1
    cpu_model = _model(seed=5)
    cpu_model.load_state_dict(found.payload["model"])
    cpu_optimizer = optimizer_for(cpu_model, run)
    cpu_optimizer.load_state_dict(found.payload["optimizer"])
    for a, b in zip(model.parameters(), cpu_model.parameters()):
        assert torch.equal(a.detach().cpu(), b.detach())
    ckpt.restore_rng(found.payload["ranks"][0]["rng"])

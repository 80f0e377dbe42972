"""The time model (date_engine/timing.py) and `date plan --devices N --bench`: the formulas, the
fits, bench.json's refusals, the forecast in the plan (torch-free)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from date_engine.cli import app
from date_engine.errors import DateError
from date_engine.planning import plan_for
from date_engine.runplan import BatchSplit
from date_engine.timing import (
    Bench,
    Link,
    allreduce_seconds,
    fit_line,
    forecast,
    link_from_points,
    parse_link,
    step_time,
)
from tests.conftest import ROOT

runner = CliRunner()
LINK = Link(alpha=20e-6, beta=2e9)


def _bench(**changes) -> Bench:
    values = dict(recipe="lenet-digits", machine="test", torch="2", device="cpu",
                  backend="gloo", processes=2, threads=1, parameters=1000,
                  gradient_bytes=4000, compute_fixed=2e-3, compute_per_sample=1e-4,
                  optimizer_seconds=5e-4, link=LINK)
    values.update(changes)
    return Bench(**values)


def test_a_ring_all_reduce_costs_latency_and_bandwidth():
    assert allreduce_seconds(LINK, 1, 10**9) == 0.0
    assert allreduce_seconds(LINK, 4, 8000) == pytest.approx(6 * 20e-6 + 1.5 * 8000 / 2e9)


def test_alpha_and_beta_come_back_from_timed_all_reduces():
    sizes = [4096, 65536, 1 << 20, 1 << 22]
    points = [(b, allreduce_seconds(LINK, 2, b)) for b in sizes]
    link = link_from_points(points, 2)
    assert link.alpha == pytest.approx(LINK.alpha) and link.beta == pytest.approx(LINK.beta)
    # the model then predicts a size it was not fitted on
    assert allreduce_seconds(link, 2, 3 << 20) == pytest.approx(allreduce_seconds(LINK, 2,
                                                                                  3 << 20))


FOUR_BENCHES = (  # all-reduce points (bytes, seconds) of four `date bench --nproc 2` on one VM
    [(4096, 0.553e-3), (65536, 0.573e-3), (246824, 2.072e-3), (262144, 0.715e-3),
     (1048576, 1.014e-3), (2097152, 1.378e-3), (4194304, 3.396e-3), (8388608, 7.483e-3)],
    [(4096, 0.667e-3), (65536, 2.651e-3), (246824, 3.568e-3), (262144, 0.852e-3),
     (1048576, 3.115e-3), (2097152, 2.004e-3), (4194304, 3.593e-3), (8388608, 8.397e-3)],
    [(4096, 0.628e-3), (65536, 0.586e-3), (262144, 0.779e-3), (548392, 1.793e-3),
     (1048576, 3.458e-3), (2097152, 2.057e-3), (4194304, 3.935e-3), (8388608, 7.677e-3)],
    [(4096, 0.550e-3), (65536, 1.151e-3), (262144, 1.601e-3), (548392, 0.865e-3),
     (1048576, 1.872e-3), (2097152, 1.649e-3), (4194304, 3.479e-3), (8388608, 7.564e-3)],
)


def test_four_benches_of_one_link_agree_on_a_size_none_timed():
    """The same two processes benched four times (timings scattered by up to 3× at one size):
    their forecasts of a 3 MiB all-reduce agree within 10% (one line of least relative error
    for α and β read 2.35–3.30 ms), and the latency and bandwidth stay apart."""
    links = [link_from_points(points, 2) for points in FOUR_BENCHES]
    forecasts = [allreduce_seconds(link, 2, 3 << 20) for link in links]
    assert max(forecasts) / min(forecasts) < 1.1
    # bound: deterministic fits of fixed points (float64): each bench's points lie on lines of
    # 1.2–1.45 GB/s at the large sizes and 0.1–0.5 ms at the small ones, which a right fit keeps
    assert all(1.2e9 < link.beta < 1.45e9 and 100e-6 < link.alpha < 500e-6 for link in links)
    # a slope that noise made negative: no bandwidth term, the latency from the mean time
    flat = link_from_points([(4096, 2e-3), (1 << 20, 1e-3)], 2)
    # bound: the latency is the times' weighted mean, between the two times, per process pair
    assert flat.beta == float("inf") and 1e-3 / 2 < flat.alpha < 2e-3 / 2


def test_the_line_fit_keeps_both_parts_non_negative():
    assert fit_line([(1, 3.0), (2, 5.0), (3, 7.0)]) == pytest.approx((1.0, 2.0))
    intercept, slope = fit_line([(1, 1.0), (2, 0.9), (4, 0.8)])  # noise: a falling time
    assert slope == 0.0 and 0.8 < intercept < 0.9  # the mean, weighted to relative error
    # time = 1 ms + 10 ns per byte; one point 3× too slow (a busy moment) moves the latency by
    # 5% (an unweighted least-squares line: by 128%)
    clean = [(1e3, 1.01e-3), (1e4, 1.1e-3), (1e5, 2e-3), (1e6, 11e-3)]
    assert fit_line(clean) == pytest.approx((1e-3, 1e-8))
    busy = clean[:2] + [(1e5, 6e-3)] + clean[3:]
    # bound: the line of least relative error through these fixed points moves the latency by
    # 4.7% (deterministic, float64); 6% is that and little more
    assert fit_line(busy)[0] == pytest.approx(1e-3, rel=0.06)
    intercept, slope = fit_line([(10, 1.0), (20, 3.0)])  # would cross below zero
    assert intercept == 0.0 and slope > 0


@pytest.mark.parametrize("text, alpha, beta", [("25GB/s,5us", 5e-6, 25e9),
                                               ("100Gb/s,2us", 2e-6, 12.5e9),
                                               ("900MB/s,1ms", 1e-3, 9e8)])
def test_link_takes_the_fabric_s_numbers(text, alpha, beta):
    link = parse_link(text)
    assert link.alpha == pytest.approx(alpha) and link.beta == pytest.approx(beta)
    assert link.source == "--link"


@pytest.mark.parametrize("text", ["25GB/s", "fast,5us", "25GB/s,5 parsecs", "0GB/s,1us"])
def test_a_link_that_does_not_read_is_one_sentence(text):
    with pytest.raises(DateError, match="--link"):
        parse_link(text)


def test_a_step_is_compute_all_reduce_and_update_with_its_bounds():
    bench = _bench()
    t = step_time(bench, BatchSplit(64, 4, 2))
    compute = 2 * (2e-3 + 1e-4 * 64)
    comm = allreduce_seconds(LINK, 4, 4000)
    assert t.compute == pytest.approx(compute) and t.communication == pytest.approx(comm)
    assert t.no_overlap == pytest.approx(compute + comm + 5e-4)
    assert t.overlap == pytest.approx(max(compute, comm) + 5e-4)
    assert step_time(bench, BatchSplit(64, 1, 1)).communication == 0.0
    # measured: a synchronised pass's wait, 2 ms at micro-batch 32 and 4 ms at 128
    waiting = _bench(wait_points=((32, 2e-3), (128, 4e-3)))
    assert waiting.wait_seconds(64) == pytest.approx(2e-3 + 2e-3 / 3)
    assert step_time(waiting, BatchSplit(64, 4, 2)).no_overlap == pytest.approx(
        t.no_overlap + 2e-3 + 2e-3 / 3)  # once a step, whatever the accumulation
    assert step_time(waiting, BatchSplit(128, 4, 2)).overlap == pytest.approx(
        step_time(bench, BatchSplit(128, 4, 2)).overlap + 4e-3)
    # beyond the sizes timed, the nearest one's: no slope extended from two noisy differences
    assert (waiting.wait_seconds(16), waiting.wait_seconds(1024)) == (2e-3, 4e-3)
    assert step_time(waiting, BatchSplit(64, 1, 2)) == step_time(bench, BatchSplit(64, 1, 2))


def test_compute_between_measured_sizes_follows_the_measurements():
    """A pass's time bends where its activations outgrow a cache: between two timed sizes the
    forecast is the line through them, outside them the fitted a + c·b."""
    points = ((64, 6e-3), (256, 18e-3), (512, 45e-3), (1024, 90e-3))
    bench = _bench(compute_points=points, compute_fixed=1e-3, compute_per_sample=8e-5)
    assert bench.compute_seconds(512) == pytest.approx(45e-3)  # measured: not the line's 42 ms
    assert bench.compute_seconds(384) == pytest.approx((18e-3 + 45e-3) / 2)
    assert bench.compute_seconds(2048) == pytest.approx(1e-3 + 8e-5 * 2048)
    assert bench.compute_seconds(16) == pytest.approx(1e-3 + 8e-5 * 16)


def test_a_sharded_step_gathers_twice_a_pass_and_reduce_scatters_once():
    """fsdp: every micro-batch gathers the parameters before forward and before backward, the
    gradient is reduce-scattered once a step; the optimizer's step is the bench's (unfused on
    shards, not faster)."""
    bench = _bench()
    t = step_time(bench, BatchSplit(64, 4, 3, "fsdp"))
    gather = 3 * 20e-6 + 0.75 * 4000 / 2e9  # (N−1)α + (N−1)/N · bytes/β
    assert t.communication == pytest.approx(2 * 3 * gather + gather)
    assert t.optimizer == 5e-4
    assert t.compute == step_time(bench, BatchSplit(64, 4, 3)).compute
    # with accumulation 1 and no layer norms: 1.5 all-reduces of the gradient
    once = step_time(bench, BatchSplit(64, 4, 1, "fsdp"))
    assert once.communication == pytest.approx(1.5 * allreduce_seconds(LINK, 4, 4000))
    half = step_time(bench, BatchSplit(64, 4, 1, "fsdp"), gather_bytes=2000)  # bf16 gathers
    assert half.communication == pytest.approx(once.communication - 2 * 0.75 * 2000 / 2e9)
    normed = step_time(bench, BatchSplit(64, 4, 1, "fsdp"), layer_norms=True)
    assert normed.communication == pytest.approx(once.communication + 6 * 20e-6)
    assert step_time(bench, BatchSplit(64, 1, 1, "fsdp")) == step_time(bench,
                                                                        BatchSplit(64, 1, 1))


def test_a_bench_that_timed_the_sharded_step_gives_its_optimizer_step_and_overhead():
    """fsdp with a measured sharded step: the shards' optimizer step replaces the whole model's,
    the sharding's overhead is paid once per micro-batch (its gathers are), the layer norms'
    all-reduce is inside the measured step (not added again), and DDP's wait does not apply."""
    plain = _bench(wait_points=((64, 3e-3),))
    bench = _bench(wait_points=((64, 3e-3),), shard_points=((32, 8e-3), (64, 10e-3)),
                   sharded_optimizer_seconds=2e-3)
    for accumulation in (1, 3):
        split = BatchSplit(64, 4, accumulation, "fsdp")
        t = step_time(bench, split, layer_norms=True)
        assert t.optimizer == 2e-3
        assert t.synchronisation == pytest.approx(accumulation * 10e-3)
        assert t.communication == pytest.approx(step_time(plain, split).communication)
        assert t.no_overlap == pytest.approx(t.compute + t.communication + t.optimizer
                                             + t.synchronisation + t.host)
        old = step_time(plain, split, layer_norms=True)  # no measurement: the former model
        assert (old.optimizer, old.synchronisation) == (5e-4, 3e-3)
    # replicas are not touched by it
    assert step_time(bench, BatchSplit(64, 4, 1)) == step_time(plain, BatchSplit(64, 4, 1))


def test_bench_json_keeps_the_sharded_measurements(tmp_path):
    bench = _bench(shard_points=((16, 4e-3),), sharded_optimizer_seconds=1e-3)
    bench.write(tmp_path / "bench.json")
    assert Bench.read(tmp_path / "bench.json") == bench
    document = json.loads((tmp_path / "bench.json").read_text())
    for field in ("shard_points", "sharded_optimizer_seconds"):  # a bench.json from before them
        del document[field]
    (tmp_path / "old.json").write_text(json.dumps(document))
    assert Bench.read(tmp_path / "old.json") == _bench()
    from rich.console import Console

    from date_engine.view.timing import render_bench

    def shown(b: Bench) -> str:
        console = Console(width=200, record=True)
        console.print(render_bench(b, tmp_path / "bench.json"))
        return console.export_text()

    assert "sharding, per micro-batch (fsdp)" in shown(bench) and "16: 4 ms" in shown(bench)
    assert "fsdp" not in shown(_bench())
    document["shard_points"] = [[16, float("inf")]]
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(DateError, match="finite"):
        Bench.read(tmp_path / "bad.json")


def test_a_sharded_plan_forecasts_the_sharded_step(tmp_path):
    path = tmp_path / "bench.json"
    _bench().write(path)
    document = json.loads(_plan("--devices", 16, "--bench", path, "--parallel", "fsdp",
                                "--json").stdout)
    spec = _digits()
    spec = spec.model_copy(update={"train": spec.train.model_copy(update={"parallel": "fsdp"})})
    planned = plan_for(spec, 256, devices=16)
    assert planned.split.sharded
    expected = forecast(_bench(), planned)
    assert document["time"]["parallel"] == "fsdp"
    assert document["time"]["step_seconds"] == pytest.approx(expected.step.no_overlap)
    assert document["time"]["baseline"]["seconds"] == pytest.approx(expected.baseline_seconds)
    shown = _plan("--devices", 16, "--bench", path, "--parallel", "fsdp")
    assert "gathers + reduce-scatter" in shown.stdout


def _digits():
    from date_engine.recipes import shipped_specs
    from date_engine.spec import load_spec

    return load_spec(shipped_specs()["lenet-digits"])


def test_the_run_the_baseline_and_the_speedup():
    bench = _bench()
    planned = plan_for(_digits(), 256, devices=16, micro_batch=16)
    time = forecast(bench, planned)
    per_step = step_time(bench, planned.split).no_overlap
    assert time.run_seconds == pytest.approx(planned.plan.total_iterations * per_step)
    assert time.baseline_devices == 1  # B0 16 ÷ micro-batch 16
    base = step_time(bench, BatchSplit(16, 1, 1)).no_overlap
    assert time.baseline_seconds == pytest.approx(planned.plan.baseline_iterations * base)
    assert time.speedup == pytest.approx(time.baseline_seconds / time.run_seconds)
    assert forecast(bench, planned, baseline_devices=4).baseline_devices == 4


def test_a_ramp_costs_each_stage_at_its_own_split():
    from tests.test_ramp import RISING, _spec

    planned = plan_for(_spec(ramp="planned"), 4096, devices=8, noise_curve=RISING)
    assert len({st.batch for st in planned.plan.ramp}) > 1
    bench = _bench(recipe="lenet-mnist")
    naive = sum(step_time(bench, planned.split_at(s)).no_overlap
                for s in range(1, planned.plan.total_iterations + 1))
    assert forecast(bench, planned).run_seconds == pytest.approx(naive)


def test_a_bench_file_that_does_not_read_is_one_sentence(tmp_path):
    missing = tmp_path / "none.json"
    with pytest.raises(DateError, match="does not exist"):
        Bench.read(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(DateError, match="not JSON"):
        Bench.read(bad)
    bad.write_text(json.dumps({"format": 99}))
    with pytest.raises(DateError, match="not a bench.json of this version"):
        Bench.read(bad)
    data = _bench().to_dict()
    data["optimizer_seconds"] = -1
    bad.write_text(json.dumps(data))
    with pytest.raises(DateError, match="non-negative"):
        Bench.read(bad)
    for field, points, words in [("wait_points", [[1]], "a pair"),
                                 ("compute_points", [["a", 1e-3]], "non-negative"),
                                 ("wait_points", [[64, float("nan")]], "non-negative")]:
        data = _bench().to_dict()
        data[field] = points
        bad.write_text(json.dumps(data))
        with pytest.raises(DateError, match=words):
            Bench.read(bad)
    good = tmp_path / "bench.json"
    measured = _bench(compute_points=((64, 8e-3),), wait_points=((64, 1e-3),))
    measured.write(good)
    assert Bench.read(good) == measured


def _plan(*args):
    return runner.invoke(app, ["plan", "lenet-digits", "--batch", "256", *map(str, args)],
                         env={"COLUMNS": "160"})


def test_devices_alone_gives_the_split_and_says_what_the_time_needs():
    result = _plan("--devices", 8)
    assert result.exit_code == 0, result.output
    assert "256 = 32 (micro-batch) × 8 (processes) × 1 (accumulation step)" in result.output
    assert "--bench" in result.output and "date bench" in result.output
    assert json.loads(_plan("--devices", 8, "--json").output)["world_size"] == 8


def test_the_plan_forecasts_the_time_on_n_devices(tmp_path):
    path = tmp_path / "bench.json"
    _bench().write(path)
    shown = _plan("--devices", 16, "--bench", path)
    assert shown.exit_code == 0, shown.output
    assert "Time on 16 devices (a forecast)" in shown.stdout and "speedup" in shown.stdout
    document = json.loads(_plan("--devices", 16, "--bench", path, "--json").stdout)
    planned = plan_for(_digits(), 256, devices=16)
    expected = forecast(_bench(), planned)
    assert document["time"]["step_seconds"] == pytest.approx(expected.step.no_overlap)
    assert document["time"]["speedup"] == pytest.approx(expected.speedup)
    assert document["world_size"] == 16
    assert set(document["time"]["budgets"]) == {"same-epochs"}
    faster = json.loads(_plan("--devices", 16, "--bench", path, "--link", "100GB/s,1us",
                              "--json").stdout)
    assert faster["time"]["step_seconds"] < document["time"]["step_seconds"]


def test_a_one_process_bench_cannot_forecast_many_devices(tmp_path):
    path = tmp_path / "bench.json"
    _bench(link=Link(0.0, 1.0, "none"), processes=1).write(path)
    result = _plan("--devices", 8, "--bench", path)
    assert result.exit_code == 2 and "--nproc 2" in result.output
    assert _plan("--devices", 1, "--bench", path).exit_code == 0
    assert _plan("--devices", 8, "--bench", path, "--link", "25GB/s,5us").exit_code == 0
    uneven = _plan("--devices", 1, "--bench", path, "--baseline-devices", 3)  # B0 = 16
    assert uneven.exit_code == 2 and "--baseline-devices 3" in uneven.output
    other = tmp_path / "other.json"
    _bench(recipe="gnmt").write(other)
    refused = _plan("--devices", 8, "--bench", other)
    assert refused.exit_code == 2 and "recipe gnmt" in refused.output


def test_the_time_forecast_imports_no_torch(tmp_path):
    path = tmp_path / "bench.json"
    _bench().write(path)
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from date_engine.cli import app\n"
        f"r = CliRunner().invoke(app, ['plan', 'lenet-digits', '--batch', '256', '--devices', "
        f"'16', '--bench', {str(path)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_date_bench_writes_what_the_plan_forecasts_from(tmp_path):
    from tests.runs import date

    result = date("bench", "lenet-digits", "--nproc", 2, "--micro-batches", "16,64",
                  "-o", tmp_path / "bench")
    assert result.returncode == 0, result.stdout + result.stderr
    bench = Bench.read(tmp_path / "bench" / "bench.json")
    assert bench.recipe == "lenet-digits" and bench.processes == 2 and bench.backend == "gloo"
    assert [m for m, _ in bench.compute_points] == [16, 64]
    assert all(s > 0 for _, s in bench.compute_points) and bench.optimizer_seconds > 0
    assert bench.gradient_bytes == 4 * bench.parameters  # fp32
    sizes = [b for b, _ in bench.allreduce_points]
    assert bench.gradient_bytes in sizes and len(sizes) >= 4
    assert bench.link.source == "measured" and bench.link.beta > 0
    # the synchronised pass, timed at 2 processes at every size
    assert [m for m, _ in bench.wait_points] == [16, 64]
    assert all(0 <= w < 1 for _, w in bench.wait_points)
    # the trainer's own work of a step beside its pass, at every size, in the forecast's step
    # (a difference of medians, clamped at 0: lenet-digits' host work, under a millisecond, is
    # within this machine's timing noise of zero, so no point is required above it)
    assert [m for m, _ in bench.host_points] == [16, 64]
    assert all(0 <= h < 1 for _, h in bench.host_points)
    # the sharded step (fsdp over the 2 processes) at every size, and its optimizer step on the
    # shards' real gradients: a shard is 1/P = 1/2 of every tensor, so that step makes at least
    # half the whole step's elementwise passes (on the slower multi-tensor path, plus an
    # all-reduce); without gradients it would skip them all
    assert [m for m, _ in bench.shard_points] == [16, 64]
    assert all(0 <= s < 1 for _, s in bench.shard_points)
    assert bench.sharded_optimizer_seconds > 0.5 * bench.optimizer_seconds
    # memory: a pass's peak at every size, the model's bytes and the optimizer's state (RMSprop
    # keeps one buffer a parameter; DATE adds its per-layer ones)
    assert [m for m, _ in bench.memory_points] == [16, 64] and bench.memory_source == "cpu resident"
    assert all(b > bench.model_bytes for _, b in bench.memory_points)
    assert bench.model_bytes == bench.gradient_bytes and bench.state_bytes >= bench.model_bytes
    planned = date("plan", "lenet-digits", "--batch", 256, "--devices", 4, "--bench",
                   tmp_path / "bench" / "bench.json", "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["time"]["speedup"] > 0


@pytest.mark.parametrize("args, words", [
    (["--link", "fast"], "--link"),
    (["--micro-batches", "16,x"], "--micro-batches"),
    (["--nproc", "0"], "--nproc"),
])
def test_date_bench_refuses_bad_input_in_one_sentence_before_it_starts(args, words, tmp_path):
    result = runner.invoke(app, ["bench", "lenet-digits", *args, "-o", str(tmp_path / "b")])
    assert result.exit_code == 2 and words in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "b" / "bench.json").exists()


GiB = 2**30


def _memory_bench(**changes) -> Bench:
    """A pass's peak: 1 GiB of the process plus 10 MiB a sample; the model 256 MiB (gradients as
    many), the optimizer's state 512 MiB: 1 GiB held of the 1 GiB fixed."""
    return _bench(memory_points=((16, GiB + 16 * 10 * 2**20), (64, GiB + 64 * 10 * 2**20)),
                  model_bytes=256 * 2**20, state_bytes=512 * 2**20,
                  memory_source="cuda allocator", **changes)


def test_the_largest_micro_batch_that_fits_a_device():
    """--device-memory: the largest of the share's halvings whose measured peak fits, and its
    accumulation; under fsdp the model, gradients and state divided over N; nothing fitting is
    said, not guessed."""
    from date_engine.timing import fit_memory, parse_memory

    bench = _memory_bench()
    assert bench.memory_bytes(32) == pytest.approx(GiB + 320 * 2**20)  # between: measured line
    assert bench.memory_bytes(256) == pytest.approx(GiB + 2560 * 2**20)  # beyond: the fit
    spec = _digits()
    run = plan_for(spec, 512, devices=2, micro_batch=None)  # 256 a device
    fit = fit_memory(bench, run, parse_memory("2GiB"))  # 1 GiB left: 102 samples
    assert (fit.micro_batch, fit.accumulation_steps) == (64, 4)
    assert fit.need_bytes == pytest.approx(GiB + 640 * 2**20)
    spec = spec.model_copy(update={"train": spec.train.model_copy(update={"parallel": "fsdp"})})
    sharded = plan_for(spec, 512, devices=2, micro_batch=None)
    fit = fit_memory(bench, sharded, parse_memory("2GiB"))  # half of 1 GiB held: 153 samples
    assert (fit.micro_batch, fit.accumulation_steps) == (128, 2)
    none = fit_memory(bench, run, parse_memory("1GB"))
    assert none.micro_batch is None and none.need_bytes > 1e9
    assert parse_memory("80GiB") == 80 * GiB and parse_memory("40 GB") == 40e9
    for bad in ("eighty", "80 parsecs", "0GiB", "1e400GB"):
        with pytest.raises(DateError, match="--device-memory"):
            parse_memory(bad)
    with pytest.raises(DateError, match="measured no memory"):
        fit_memory(_bench(), run, GiB)


def test_date_plan_names_the_micro_batch_that_fits(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_memory_bench().to_dict()))
    args = ["plan", str(ROOT / "recipes/lenet-digits.yaml"), "--batch", "512", "--devices", "2",
            "--bench", str(path)]
    fits = CliRunner().invoke(app, [*args, "--device-memory", "2GiB"], env={"COLUMNS": "200"})
    assert fits.exit_code == 0, fits.output
    assert "Memory: micro-batch 64 fits 2 GiB" in " ".join(fits.output.split())
    assert "--micro-batch 64" in fits.output
    document = json.loads(CliRunner().invoke(app, [*args, "--device-memory", "2GiB",
                                                   "--json"]).output)
    assert document["memory"]["micro_batch"] == 64
    none = CliRunner().invoke(app, [*args, "--device-memory", "1GB"], env={"COLUMNS": "200"})
    assert none.exit_code == 0 and "not even one sample per pass fits" in none.output
    alone = CliRunner().invoke(app, args[:-2] + ["--device-memory", "2GiB"])
    assert alone.exit_code == 2 and "--device-memory needs --bench" in alone.output


def test_the_trainers_host_work_is_part_of_every_step():
    """A step's host work (the bench's whole trainer step less its pass and optimizer step) adds
    to both bounds of the step, at the micro-batch's interpolated value; none in an old bench."""
    plain = _bench()
    bench = _bench(host_points=((16, 1e-3), (64, 3e-3)))
    split = BatchSplit(32, 2, 2)
    before, after = step_time(plain, split), step_time(bench, split)
    assert bench.host_seconds(32) == pytest.approx(1e-3 + (32 - 16) / 48 * 2e-3)
    assert bench.host_seconds(8) == 1e-3 and bench.host_seconds(512) == 3e-3
    assert after.host == pytest.approx(bench.host_seconds(32)) and before.host == 0.0
    assert after.no_overlap - before.no_overlap == pytest.approx(after.host)
    assert after.overlap - before.overlap == pytest.approx(after.host)

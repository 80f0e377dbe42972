"""DATE against a float64 per-parameter reference of docs/algorithm.md §3, and as an optimizer."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from date_engine.optim import DATE
from date_engine.optim.ratios import DEFAULTS
from tests.bounds import UNIT_ROUNDOFF, close_within, steps_bound, units

DEFAULT_GAMMA, DEFAULT_TRUST_COEFFICIENT = DEFAULTS.gamma, DEFAULTS.trust_coefficient
DEFAULT_LOWER, DEFAULT_UPPER = DEFAULTS.lower, DEFAULTS.upper

STEPS = 10
BASES = {
    # name: (torch class, group-0 options, group-1 options)
    "sgd": (torch.optim.SGD, dict(lr=0.1), dict(lr=0.05, weight_decay=1e-2)),
    "momentum": (
        torch.optim.SGD,
        dict(lr=0.1, momentum=0.9, dampening=0.1),
        dict(lr=0.05, momentum=0.9, weight_decay=1e-2),
    ),
    "nesterov": (
        torch.optim.SGD,
        dict(lr=0.1, momentum=0.9, nesterov=True),
        dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-2),
    ),
    "adagrad": (torch.optim.Adagrad, dict(lr=0.1), dict(lr=0.05, weight_decay=1e-2)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=1e-2), dict(lr=5e-3, weight_decay=1e-2, momentum=0.5)),
    "rmsprop-plain": (torch.optim.RMSprop, dict(lr=1e-2), dict(lr=5e-3, weight_decay=1e-2)),
    "adam": (torch.optim.Adam, dict(lr=1e-2), dict(lr=5e-3, weight_decay=1e-2)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2), dict(lr=5e-3, weight_decay=1e-1)),
    "adam-amsgrad": (torch.optim.Adam, dict(lr=1e-2, amsgrad=True),
                     dict(lr=5e-3, weight_decay=1e-2, amsgrad=True, maximize=True)),
}
# Bases the fused per-layer kernels serve (every group), and how each implementation is asked for.
FUSED = {"sgd", "momentum", "adagrad", "rmsprop-plain", "adam", "adamw", "adam-amsgrad"}
IMPLEMENTATIONS = {"fused": dict(), "foreach": dict(fused=False),
                   "loop": dict(fused=False, foreach=False)}
MODES = {
    "dynamic": dict(mode="dynamic"),
    "dynamic-gamma4": dict(mode="dynamic", gamma=4.0),
    "static": dict(mode="static", trust_coefficient=0.05, lower=0.1, upper=3.0),
    "off": dict(mode="off"),
}

# Parameters: (name, shape, init, gradient scale, group). Scales differ so that the raw ratios
# spread over orders of magnitude and the clamps bind.
LAYOUT = [
    ("w1", (6, 5), "normal", 1.0, 0),
    ("one", (1,), "normal", 1.0, 0),  # shape [1]: ndim <= 1, kept at r = 1
    ("bias", (5,), "zeros", 1.0, 0),  # zero-initialised bias
    ("zero_w", (3, 3), "zeros", 0.1, 0),  # ||w|| = 0 at the first step: r = 1 then
    ("nograd", (2, 2), "normal", None, 0),  # never gets a gradient
    ("w2", (4, 3, 2), "normal", 10.0, 1),
    ("w3", (8, 2), "normal", 0.01, 1),
]


def make_params(dtype=torch.float64, seed=0):
    """The LAYOUT's parameters; the same values in every dtype (drawn in float64)."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape, init, _, _ in LAYOUT:
        value = (
            torch.randn(shape, generator=gen, dtype=torch.float64)
            if init == "normal"
            else torch.zeros(shape, dtype=torch.float64)
        )
        params[name] = torch.nn.Parameter(value.to(dtype))
    return params


def gradients(dtype=torch.float64, seed=1, steps=STEPS):
    """``steps`` gradients of the LAYOUT; the same values in every dtype (drawn in float64)."""
    gen = torch.Generator().manual_seed(seed)
    return [
        {
            name: None if scale is None else
            (scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
            for name, shape, _, scale, _ in LAYOUT
        }
        for _ in range(steps)
    ]


def build(base_name, params):
    cls, opts0, opts1 = BASES[base_name]
    groups = [
        {"params": [params[n] for n, *_, g in LAYOUT if g == k], **opts}
        for k, opts in enumerate((opts0, opts1))
    ]
    return cls(groups)


def run(opt, params, grads, trace: dict | None = None):
    """Step ``opt`` through ``grads``; returns the parameters. ``trace``, if given, receives the
    2-norms over all parameters of w_0..w_T ("weights"), of each step w_t − w_{t−1} ("steps")
    and of each step's gradient ("gradients"), and each parameter's largest entry over the run
    ("largest"): the sizes tests/bounds.py's bounds take."""
    def flat():
        return torch.cat([p.detach().double().flatten() for p in params.values()])

    def largest():
        for n, p in params.items():
            trace["largest"][n] = max(trace["largest"].get(n, 0.0), p.detach().abs().max().item())

    if trace is not None:
        trace.update(weights=[flat().norm().item()], steps=[], gradients=[], largest={})
        largest()
    for step_grads in grads:
        before = flat() if trace is not None else None
        for name, p in params.items():
            p.grad = None if step_grads[name] is None else step_grads[name].clone()
        opt.step()
        if trace is not None:
            after = flat()
            trace["weights"].append(after.norm().item())
            trace["steps"].append((after - before).norm().item())
            trace["gradients"].append(math.sqrt(sum(
                g.double().square().sum().item() for g in step_grads.values() if g is not None)))
            largest()
    return {n: p.detach().clone() for n, p in params.items()}


LARGEST_LAYER = max(math.prod(shape) for _, shape, *_ in LAYOUT)
"""n of the LAYOUT's largest tensor: a norm over it rounds at most n + 1 times, in any order."""
KERNEL_ROUNDINGS = 2 * (LARGEST_LAYER + 1) + 6 + 16
"""Roundings between the inputs of one step and an element of its update, on any path and base,
counted from docs/algorithm.md §3: the two norms of a layer's ratio (each n + 1: the squares'
sum in any order and the root), the ratio, its geometric mean and clamps (6: log and exp as
two each, the division, the clamp exact), and the base's elementwise update (at most 16:
Adam's moments 5, bias corrections 4, root 2, + ε 1, division 1, times lr·r 2, minus 1)."""


# --------------------------------------------------------------------- the float64 reference


def reference_ratios(
    params,
    grads,
    mode,
    gamma=DEFAULT_GAMMA,
    trust_coefficient=DEFAULT_TRUST_COEFFICIENT,
    lower=DEFAULT_LOWER,
    upper=DEFAULT_UPPER,
):
    """r_l per docs/algorithm.md §3, one parameter at a time, in Python floats."""
    rho, valid = {}, {}
    for name, shape, *_ in LAYOUT:
        g = grads[name]
        if g is None or len(shape) <= 1:
            continue
        w_norm, g_norm = params[name].norm().item(), g.norm().item()
        valid[name] = w_norm > 0 and g_norm > 0
        rho[name] = w_norm / g_norm if valid[name] else 1.0
    if mode == "off":
        return {n: 1.0 for n in rho}
    if mode == "static":
        return {
            n: min(max(trust_coefficient * rho[n], lower), upper) if valid[n] else 1.0 for n in rho
        }
    logs = [math.log(rho[n]) for n in rho if valid[n]]
    m = math.exp(sum(logs) / len(logs)) if logs else 1.0
    return {n: min(max(rho[n] / m, 1 / gamma), gamma) if valid[n] else 1.0 for n in rho}


def reference_run(base_name, mode_opts, params, grads):
    cls, opts0, opts1 = BASES[base_name]
    group_opts = {0: opts0, 1: opts1}
    mode = mode_opts["mode"]
    rule = {k: v for k, v in mode_opts.items() if k != "mode"}
    sgd_state = {}
    per_param_base = {}  # adaptive bases: one float64 torch optimizer per parameter
    for name, *_, g in LAYOUT:
        if cls is not torch.optim.SGD:
            per_param_base[name] = cls([params[name]], **group_opts[g])
    for step_grads in grads:
        with torch.no_grad():
            ratios = reference_ratios(params, step_grads, mode, **rule)
            for name, *_, group in LAYOUT:
                g = step_grads[name]
                if g is None:
                    continue
                p, r, opts = params[name], ratios.get(name, 1.0), group_opts[group]
                if cls is torch.optim.SGD:
                    # d = r·(g + λw); buf = μ·buf + (1 − τ)·d (buf = d at first); w -= lr·(step)
                    d = r * (g + opts.get("weight_decay", 0.0) * p)
                    mu = opts.get("momentum", 0.0)
                    if mu:
                        buf = sgd_state.get(name)
                        buf = (
                            d.clone()
                            if buf is None
                            else mu * buf + (1 - opts.get("dampening", 0.0)) * d
                        )
                        sgd_state[name] = buf
                        d = d + mu * buf if opts.get("nesterov") else buf
                    p -= opts["lr"] * d
                else:
                    before = p.detach().clone()
                    p.grad = g.clone()
                    with torch.enable_grad():
                        per_param_base[name].step()
                    p.copy_(before + r * (p - before))
    return {n: p.detach().clone() for n, p in params.items()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("base_name", BASES)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_matches_float64_reference(base_name, mode, implementation):
    grads, trace = gradients(), {}
    params = make_params()
    opt = DATE(build(base_name, params), **IMPLEMENTATIONS[implementation], **MODES[mode])
    got = run(opt, params, grads, trace)
    want = reference_run(base_name, MODES[mode], make_params(), grads)
    # both runs take the same exact steps in float64, each rounding an element at most
    # KERNEL_ROUNDINGS times a step, each by at most u times the parameter's largest entry over
    # the run (which bounds the step and the state in this layout): within units(84·10) = 232
    # such units of exact arithmetic each (measured: at most 4 apart)
    for name in got:
        unit = UNIT_ROUNDOFF[torch.float64] * trace["largest"][name]
        # bound: the comment above
        torch.testing.assert_close(got[name], want[name], rtol=0,
                                   atol=2 * units(KERNEL_ROUNDINGS * STEPS) * unit, msg=name)
    assert torch.equal(got["nograd"], make_params()["nograd"])
    if mode == "off":
        assert opt.implementation == "off"
    elif implementation != "fused" or base_name in FUSED:
        assert opt.implementation == implementation
    else:  # the fused kernels do not serve this base: the foreach path ran
        assert opt.implementation == "foreach"


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("base_name", sorted(FUSED))
def test_fused_path_in_float32_stays_within_its_rounding_bound_over_100_steps(base_name, mode):
    """The fused per-layer kernels in float32 against DATE in float64 (the path the reference
    test above checks), 100 steps from the same values, within the bound float32's roundings
    allow (tests/bounds.py: steps_bound; measured on the development VM 1.6e-7 to 3.4e-7, AdamW
    1.6e-6, against bounds of 5.7e-6 to 4e-5)."""
    grads64, grads32 = gradients(steps=100, seed=2), gradients(torch.float32, steps=100, seed=2)
    a = make_params(torch.float32)
    fused = DATE(build(base_name, a), **MODES[mode])
    got = run(fused, a, grads32)
    b, trace = make_params(), {}
    want = run(DATE(build(base_name, b), fused=False, **MODES[mode]), b, grads64, trace)
    assert fused.implementation == "fused"
    cls, opts0, opts1 = BASES[base_name]
    lr = max(opts0["lr"], opts1["lr"])
    sgd = cls is torch.optim.SGD
    beta = max(o.get("momentum", o.get("betas", (0.9,) if "adam" in base_name else (0,))[0])
               for o in (opts0, opts1))
    # bound: steps_bound; a momentum or first moment β carries 1/(1 − β) steps' roundings
    # (AdaGrad's and RMSprop's sums of squares do not cancel: 1); torch's SGD kernel takes DATE's
    # r through 1 − dampening, rounded at the size of lr·‖g‖; AdamW multiplies w by 1 − lr·λ
    # rounded once, every step; a dynamic ratio depends on the norms of w through ρ_l and their
    # geometric mean (sensitivity 2), a static one through ρ_l alone (1)
    bound = steps_bound(torch.float32, trace["weights"], trace["steps"],
                        roundings=KERNEL_ROUNDINGS, memory=1 / (1 - beta),
                        gradients=[lr * g for g in trace["gradients"]] if sgd else [],
                        decays=base_name == "adamw", sensitivity=2 if mode == "dynamic" else 1)
    assert_relative_error(got, want, bound)


def assert_relative_error(got, want, bound):
    """||got − want|| ≤ bound·||want||, all parameters as one vector (got in float32, want in
    float64)."""
    a = torch.cat([got[n].double().flatten() for n in sorted(got)])
    b = torch.cat([want[n].flatten() for n in sorted(got)])
    error = ((a - b).norm() / b.norm()).item()
    assert error <= bound, error


# Every dtype torch's bases accept, and a group mixing them (one dtype per parameter, in turn).
DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "mixed": [torch.float32, torch.bfloat16, torch.float64, torch.float16],
}


def cast(values: dict, dtype) -> dict:
    """``values`` (tensors or None, LAYOUT order) in ``dtype``, or in turn in each of a list."""
    cycle = dtype if isinstance(dtype, list) else [dtype]
    return {name: None if v is None else v.to(cycle[i % len(cycle)])
            for i, (name, v) in enumerate(values.items())}


def in_dtype(dtype, grads_in_float64):
    """The LAYOUT's parameters and gradients in ``dtype``; the float64 copies of those same
    (rounded) values, the starting point of the exact-arithmetic run."""
    params = {n: torch.nn.Parameter(v) for n, v in cast(make_params(), dtype).items()}
    grads = [cast(g, dtype) for g in grads_in_float64]
    exact_params = {n: torch.nn.Parameter(p.detach().double().clone()) for n, p in params.items()}
    exact_grads = [{n: None if g is None else g.double().clone() for n, g in step.items()}
                   for step in grads]
    return params, grads, exact_params, exact_grads


def error_of(got: dict, exact: dict) -> torch.Tensor:
    """Each parameter's distance from float64, in units of its dtype's unit roundoff of its size:
    |got − exact|∞ / (u·|exact|∞); one ulp of an entry is at most 2 of these units."""
    return torch.tensor([((got[n].double() - exact[n]).abs().max()
                          / (UNIT_ROUNDOFF[got[n].dtype] * exact[n].abs().max().clamp_min(1e-30))
                          ).item() for n in got])


DTYPE_STEPS = 5
SAME_STEP_UNITS = 2 * units(18 * DTYPE_STEPS)
"""How far (in :func:`error_of`'s units) DATE with every ratio 1 may be from its base in any
dtype, beyond the base's own distance from exact arithmetic: both take the same exact step
(r = 1 multiplies exactly), and a path differs from the base at most in the order and fusion of
the base's elementwise update (≤ 16 roundings, the 16 of KERNEL_ROUNDINGS) and the state's and
parameter's stores (2): 18 roundings a step, each at most one unit (the update and the state are
no larger than the parameter's largest entry in this layout), in each of the two runs; so
|DATE − exact| ≤ |base − exact| + 2·units(18·5) = base + 152 on any CPU. docs/optimizer.md,
"Every dtype", states it."""


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("base_name", BASES)
def test_with_unit_ratios_it_is_its_base_in_every_dtype(base_name, dtype, implementation):
    """With gamma = 1 every ratio is 1 and DATE must take its base's step, in the parameters'
    own dtype, whichever path runs: as close to exact (float64) arithmetic as torch's base in
    that dtype, within SAME_STEP_UNITS — and bit for bit the base on the loop path of the
    adaptive bases. torch 2.13's fused SGD kernel on
    float16/bfloat16 was ~3000 units off here (it did not write the parameters);
    docs/optimizer.md, "Every dtype", gives the table this test checks."""
    grads64 = gradients(steps=DTYPE_STEPS, seed=3)
    a, grads, exact_params, exact_grads = in_dtype(DTYPES[dtype], grads64)
    b, _, _, _ = in_dtype(DTYPES[dtype], grads64)
    date = DATE(build(base_name, a), mode="dynamic", gamma=1.0, **IMPLEMENTATIONS[implementation])
    got = run(date, a, grads)
    want = run(build(base_name, b), b, grads)
    exact = run(build(base_name, exact_params), exact_params, exact_grads)
    assert (date.last_ratios == 1).all()
    for name in got:
        assert got[name].dtype == want[name].dtype, name
    date_error, base_error = error_of(got, exact), error_of(want, exact)
    finite = base_error.isfinite()  # float16: torch's Adam, RMSprop, AdaGrad divide by √v + ε
    # where v underflows to 0 and ε = 1e-8 rounds to 0 (its own error is then inf)
    # bound: SAME_STEP_UNITS
    assert (date_error[finite] <= base_error[finite] + SAME_STEP_UNITS).all(), \
        (date_error, base_error)
    if dtype != "float16" and "float16" not in str(DTYPES[dtype]):
        assert finite.all(), base_error
    if implementation == "loop" and BASES[base_name][0] is not torch.optim.SGD:
        for name in got:  # not finite where the base's float16 is not (inf may read NaN)
            finite = want[name].isfinite()
            assert torch.equal(got[name].isfinite(), finite), name
            assert torch.equal(got[name][finite], want[name][finite]), name


def dtype_errors(base_name: str, dtype_name: str) -> tuple[float, float]:
    """The largest error, over the three step paths and the LAYOUT's parameters, of DATE with
    gamma = 1 and of its base, against float64 (units of :func:`error_of`; NaN/inf left out):
    the numbers of docs/optimizer.md's table "Every dtype"."""
    grads64 = gradients(steps=DTYPE_STEPS, seed=3)
    worst_date = worst_base = 0.0
    for implementation in IMPLEMENTATIONS:
        a, grads, exact_params, exact_grads = in_dtype(DTYPES[dtype_name], grads64)
        b, _, _, _ = in_dtype(DTYPES[dtype_name], grads64)
        date = DATE(build(base_name, a), mode="dynamic", gamma=1.0,
                    **IMPLEMENTATIONS[implementation])
        date_error = error_of(run(date, a, grads), exact := run(build(base_name, exact_params),
                                                                exact_params, exact_grads))
        base_error = error_of(run(build(base_name, b), b, grads), exact)
        finite = base_error.isfinite() & date_error.isfinite()
        worst_date = max(worst_date, date_error[finite].max().item())
        worst_base = max(worst_base, base_error[finite].max().item())
    return worst_date, worst_base


def test_the_docs_dtype_table_states_the_bound_every_cpu_meets():
    """docs/optimizer.md's table is one machine's measurement: the bound beside it is what every
    CPU meets, and what this test checks, for the table's numbers and for this machine's."""
    import re

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "optimizer.md").read_text()
    section = text[text.index("## Every dtype"):]
    assert f"base + {SAME_STEP_UNITS:.0f} units" in section
    lines = [x for x in section.splitlines() if x.startswith("| `")]
    head = next(x for x in section.splitlines() if x.startswith("| base"))
    header = [c.strip() for c in head.strip("|").split("|")]
    assert {r.split("`")[1] for r in lines} == set(BASES)
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        base_name = cells[0].strip("`")
        for dtype_name, cell in zip(header[1:], cells[1:]):
            shown = [float(x) for x in re.findall(r"[\d.]+", cell)]
            got = dtype_errors(base_name, dtype_name)
            for date_error, base_error in (shown, got):
                # bound: SAME_STEP_UNITS
                assert date_error <= base_error + SAME_STEP_UNITS, (base_name, dtype_name, got)
            if dtype_name == "float64":  # the float64 run is the base itself
                assert shown[1] == got[1] == 0.0


@pytest.mark.parametrize("base_name", BASES)
def test_ratios_actually_bind(base_name):
    """Guard the reference test against passing trivially: the clamps and the zero norm matter."""
    params = make_params()
    opt = DATE(build(base_name, params))
    grads = gradients()
    run(opt, params, grads[:1])
    r = opt.last_ratios
    assert r.numel() == 4  # w1, zero_w, w2, w3 — the tensors with ndim > 1 and a gradient
    assert (r == DEFAULT_GAMMA).any() and (r == 1 / DEFAULT_GAMMA).any(), r  # both bounds bind
    assert (r == 1.0).any(), r  # zero_w: ||w|| = 0 at the first step


@pytest.mark.parametrize("flag", ["fused", "foreach"])
@pytest.mark.parametrize("base_name", ["momentum", "adam", "adamw"])
def test_bases_built_fused_or_foreach_take_the_same_fused_step(base_name, flag):
    """A base built with torch's fused=True or foreach=True (SGD's fused=True included, once
    refused) runs DATE's fused per-layer step, bit for bit that of the base built plain; with the
    ratio off it is the base's own fused step."""
    cls, opts0, opts1 = BASES[base_name]
    grads = gradients(torch.float32)
    a, b = make_params(torch.float32), make_params(torch.float32)
    flagged = DATE(cls([{"params": [a[n] for n, *_, g in LAYOUT if g == k], **o}
                        for k, o in enumerate((opts0, opts1))], **{flag: True}))
    got = run(flagged, a, grads)
    want = run(DATE(build(base_name, b)), b, grads)
    assert flagged.implementation == "fused"
    for name in got:
        assert torch.equal(got[name], want[name]), name


def steady_state_allocations(opt, params, grads) -> list[tuple[str, int]]:
    """Allocations above 1 MiB during one step after two (profiler memory events)."""
    from torch.profiler import ProfilerActivity, profile

    for step_grads in grads[:2]:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
    for p, g in zip(params, grads[2]):
        p.grad = g.clone()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        opt.step()
    return [(e.name, e.self_cpu_memory_usage) for e in prof.events()
            if e.self_cpu_memory_usage > 2**20]


BIG_BASES = {  # torch classes and options for the no-temporaries test
    "momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-4)),
    "adam": (torch.optim.Adam, dict(lr=1e-3, weight_decay=1e-4)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-3)),
    "rmsprop": (torch.optim.RMSprop, dict(lr=1e-3)),
    "adagrad": (torch.optim.Adagrad, dict(lr=1e-2)),
}


@pytest.mark.parametrize("base_name", BIG_BASES)
def test_no_parameter_sized_temporaries_after_the_first_step(base_name):
    """The fused step allocates nothing above 1 MiB once its state exists; the foreach path
    over the same base does (which is what makes the check bite)."""
    cls, options = BIG_BASES[base_name]
    shapes = [(512, 1024), (1024,), (1024, 768)]  # 2-3 MiB tensors
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(3)]

    def fresh():
        return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]

    params = fresh()
    assert steady_state_allocations(DATE(cls(params, **options)), params, grads) == []
    params = fresh()
    slow = DATE(cls(params, **options, foreach=True), fused=False)
    assert steady_state_allocations(slow, params, grads), "the check sees no temporary at all"


@pytest.mark.parametrize("base_name", BASES)
def test_mode_off_is_exactly_the_base(base_name):
    grads = gradients(torch.float32)
    a, b = make_params(torch.float32), make_params(torch.float32)
    got = run(DATE(build(base_name, a), mode="off"), a, grads)
    want = run(build(base_name, b), b, grads)
    for name in got:
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("base_name", ["sgd", "momentum", "nesterov"])
def test_sgd_path_with_unit_ratios_is_torch_sgd(base_name):
    """DATE runs SGD's update itself (to fold r_l in); with every r_l = 1 it must be SGD's, up to
    float32 rounding (Nesterov's two terms are added to w one after the other)."""
    grads, trace = gradients(torch.float32), {}
    a, b = make_params(torch.float32), make_params(torch.float32)
    got = run(DATE(build(base_name, a), mode="static", lower=1.0, upper=1.0), a, grads)
    want = run(build(base_name, b), b, grads, trace)
    for name in got:  # SGD's update (at most 16 roundings) and two stores, in another order
        torch.testing.assert_close(got[name], want[name], msg=name, **close_within(
            torch.float32, 18 * STEPS, trace["largest"][name]))


@pytest.mark.parametrize("base_name", BASES)
def test_foreach_path_equals_loop_fallback(base_name):
    grads, trace = gradients(torch.float32), {}
    a, b = make_params(torch.float32), make_params(torch.float32)
    got = run(DATE(build(base_name, a), foreach=True), a, grads)
    want = run(DATE(build(base_name, b), foreach=False), b, grads, trace)
    for name in got:  # the same roundings (norms, ratios, update) in another order
        torch.testing.assert_close(got[name], want[name], msg=name, **close_within(
            torch.float32, KERNEL_ROUNDINGS * STEPS, trace["largest"][name]))


def test_exclude_by_name_and_by_group():
    params = make_params()
    names = [n for n, *_ in LAYOUT]
    base = torch.optim.SGD(
        [
            {"params": [(n, params[n]) for n in names if n != "w3"]},
            {"params": [("w3", params["w3"])], "layer_ratio": False},
        ],
        lr=0.1,
    )
    opt = DATE(base, exclude=lambda name, p: name == "w2")
    run(opt, params, gradients()[:1])
    assert opt.last_ratios.numel() == 2  # w1 and zero_w; w2 by name, w3 by its group


def test_unknown_base_needs_a_placement():
    p = torch.nn.Parameter(torch.randn(3, 3))
    with pytest.raises(ValueError, match="placement="):
        DATE(torch.optim.ASGD([p]))
    DATE(torch.optim.ASGD([p]), placement="update")


# ------------------------------------------------------------- behaving as a torch optimizer


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batches(n=8, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(32, 5, generator=gen), torch.randint(0, 3, (32,), generator=gen))
        for _ in range(n)
    ]


def train(model, opt, data, sched=None, scaler=None):
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if sched is not None:
            sched.step()


def make(base_cls, model, **kw):
    return DATE(base_cls(model.parameters(), lr=0.05, **kw))


@pytest.mark.parametrize(
    "base_cls, kw",
    [
        (torch.optim.SGD, dict(momentum=0.9, weight_decay=1e-4)),
        (torch.optim.Adam, dict(weight_decay=1e-4)),
    ],
    ids=["momentum", "adam"],
)
def test_resume_from_state_dict_reproduces_the_trajectory(base_cls, kw):
    data = batches(8)
    model = tiny_model()
    opt = make(base_cls, model, **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    train(model, opt, data[:4], sched)
    saved = copy.deepcopy(
        {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    )
    train(model, opt, data[4:], sched)

    # a fresh process: build model, optimizer and scheduler as at the start, then load all three
    fresh = tiny_model(seed=99)
    opt2 = make(base_cls, fresh, **kw)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0 / (1 + s))
    fresh.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    assert opt2.steps == 4 and torch.equal(opt2.last_ratios, saved["opt"]["date"]["last_ratios"])
    train(fresh, opt2, data[4:], sched2)

    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    assert opt2.steps == opt.steps == 8


def test_scheduler_reaches_the_base_after_a_load():
    model = tiny_model()
    opt = make(torch.optim.SGD, model, momentum=0.9)
    train(model, opt, batches(2))
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # replaces the base's group dicts
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
    train(model, opt, batches(1), sched)
    assert opt.base.param_groups[0]["lr"] == pytest.approx(0.005)
    assert opt.param_groups is opt.base.param_groups and opt.state is opt.base.state


def test_loads_a_plain_base_state_dict():
    model = tiny_model()
    base = torch.optim.Adam(model.parameters(), lr=0.05)
    train(model, base, batches(2))
    opt = make(torch.optim.Adam, model)
    opt.load_state_dict(base.state_dict())
    assert opt.steps == 0 and len(opt.state) == len(base.state)


@pytest.mark.parametrize("base_cls", [torch.optim.SGD, torch.optim.Adam], ids=["sgd", "adam"])
def test_grad_scaler_ratios_see_unscaled_gradients(base_cls):
    data = batches(4)
    a, b = tiny_model(), tiny_model()
    opt_a, opt_b = make(base_cls, a), make(base_cls, b)
    train(a, opt_a, data)
    train(b, opt_b, data, scaler=torch.amp.GradScaler("cpu", init_scale=2.0**12))
    # the loss scaled by 2^12 and the gradients unscaled by 2^-12: multiplying by a power of
    # two is exact (IEEE 754, away from overflow and subnormals), so the runs are one
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(opt_a.last_ratios, opt_b.last_ratios)


@pytest.mark.parametrize("base_cls", [torch.optim.SGD, torch.optim.Adam], ids=["sgd", "adam"])
def test_grad_scaler_overflow_step_changes_nothing(base_cls):
    model = tiny_model()
    opt = make(base_cls, model, **({"momentum": 0.9} if base_cls is torch.optim.SGD else {}))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    train(model, opt, batches(2), scaler=scaler)
    params = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())

    x, y = batches(1)[0]
    opt.zero_grad()
    scaler.scale(torch.nn.functional.cross_entropy(model(x), y)).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()

    assert all(torch.equal(p, q) for p, q in zip(params, model.parameters()))
    assert opt.steps == 2
    after = opt.state_dict()
    for k, s in state["state"].items():
        for key, value in s.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(after["state"][k][key]))
    assert scaler.get_scale() == 2.0**11


def test_step_hooks_and_closure():
    model = tiny_model()
    opt = make(torch.optim.SGD, model)
    calls = []
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(o.steps))
    x, y = batches(1)[0]

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss is not None and calls == [1]


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("base_name", BASES)
def test_step_never_synchronises_with_the_host(monkeypatch, base_name, mode):
    """No .item(), .tolist() or Python branch on a tensor value inside step() on the path
    accelerators take (the fused per-layer path reads the rates on the host, where they are)."""
    params = make_params(torch.float32)
    opt = DATE(build(base_name, params), mode=mode, fused=False)
    grads = gradients(torch.float32)
    run(opt, params, grads[:1])  # state creation may inspect values; steady state may not

    inside_base = []  # the base's own step is torch's business (on the CPU it reads its step count)
    base_step = opt.base.step

    def guarded_base_step(*args, **kwargs):
        inside_base.append(True)
        try:
            return base_step(*args, **kwargs)
        finally:
            inside_base.pop()

    monkeypatch.setattr(opt.base, "step", guarded_base_step)
    for method in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, method)

        def refuse(*args, _original=original, **kwargs):
            if not inside_base:
                raise AssertionError("host synchronisation inside DATE.step()")
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, refuse)
    run(opt, params, grads[1:3])


def test_deepcopy_keeps_working():
    model = tiny_model()
    opt = make(torch.optim.Adam, model)
    train(model, opt, batches(2))
    clone = copy.deepcopy(opt)
    assert clone.steps == 2 and clone.base is not opt.base
    train(model, clone, batches(1))
    assert clone.steps == 3


STEP_PATH_CASES = [(name, {}, mode) for name in ("sgd", "momentum", "nesterov", "adagrad",
                                                 "rmsprop", "adam", "adamw", "lars", "lamb")
                   for mode in ("dynamic", "off")]
STEP_PATH_CASES += [("rmsprop", {"momentum": 0.9}, "dynamic"),
                    ("rmsprop", {"centered": True}, "dynamic")]


@pytest.mark.parametrize(("name", "changes", "mode"), STEP_PATH_CASES)
def test_the_plan_says_which_step_runs(name, changes, mode):
    """`date plan` prints catalog.step_path (torch-free); it must be what the built optimizer
    runs on the CPU."""
    from date_engine.catalog import CATALOG, LAYER_RATIO_DEFAULTS, OptimizerSettings, step_path
    from date_engine.optim.build import build_optimizer

    options = {**CATALOG[name].defaults, **changes}
    if CATALOG[name].family == "layerwise":
        mode = "off"  # LARS and LAMB are never wrapped
    settings = OptimizerSettings(name, options, {"mode": mode, **LAYER_RATIO_DEFAULTS[mode]})
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = build_optimizer(model.named_parameters(), settings, lr=1e-2)
    model(torch.randn(5, 4)).square().sum().backward()
    opt.step()
    path, why = step_path(name, options, mode)
    assert opt.implementation == path
    if path == "off":  # the base's own step: torch's fused kernel where it has one
        assert bool(opt.base.param_groups[0].get("fused")) == ("fused kernel" in why), why


@pytest.mark.parametrize("name", ["date-adam", "date-momentum", "lars", "lamb"])
def test_tensors_off_the_host_take_the_multi_tensor_path(name):
    """The dispatch an accelerator gets, exercised without one: parameters that are not CPU
    tensors (here on torch's "meta" device, which has no per-layer fused kernels), or whose
    gradient is not contiguous, step through the foreach path; the same parameters on the CPU take
    the per-layer fused kernels."""
    from date_engine.optim._fused import host_kernels
    from date_engine.optim.lamb import LAMB
    from date_engine.optim.lars import LARS

    make = {"date-adam": lambda ps: DATE(torch.optim.Adam(ps, lr=1e-3)),
            "date-momentum": lambda ps: DATE(torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
            "lars": lambda ps: LARS(ps, lr=0.1), "lamb": lambda ps: LAMB(ps, lr=1e-3)}[name]

    def stepped(device, grad=None):
        w = torch.nn.Parameter(torch.ones(4, 3, device=device))
        w.grad = torch.full((4, 3), 0.5, device=device) if grad is None else grad
        opt = make([w])
        opt.step()
        return opt, w

    opt, w = stepped("meta")
    assert not host_kernels([w], "adam") and opt.implementation == "foreach"
    opt, w = stepped("cpu", grad=torch.full((3, 4), 0.5).t())  # a transposed, strided gradient
    assert not host_kernels([w], "adam") and opt.implementation == "foreach"
    opt, w = stepped("cpu")
    assert host_kernels([w], "adam") and opt.implementation == "fused"

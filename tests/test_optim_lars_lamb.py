"""LARS and LAMB (foreach) against the per-parameter loops of docs/algorithm.md §4, in float64."""

from __future__ import annotations

import copy

import pytest
import torch

from date_engine.optim import LAMB, LARS
from date_engine.optim.reference import ReferenceLAMB, ReferenceLARS
from tests.bounds import close_within, float64_formula, steps_bound, units
from tests.test_optim_date import (
    KERNEL_ROUNDINGS,
    assert_relative_error,
    gradients,
    make_params,
    run,
)

CASES = {
    "lars": (LARS, ReferenceLARS, dict(lr=0.1, momentum=0.9), dict(lr=0.05, weight_decay=1e-2)),
    "lars-clipped": (
        LARS,
        ReferenceLARS,
        dict(lr=0.1, trust_coefficient=0.02, phi_bounds=(0.5, 2.0)),
        dict(lr=0.05, momentum=0.5, weight_decay=1e-3),
    ),
    "lamb": (LAMB, ReferenceLAMB, dict(lr=1e-2), dict(lr=5e-3, weight_decay=1e-2)),
    "lamb-clipped": (
        LAMB,
        ReferenceLAMB,
        dict(lr=1e-2, phi_bounds=(0.5, 2.0)),
        dict(lr=5e-3, betas=(0.8, 0.99), eps=1e-4, weight_decay=1e-1),
    ),
}
GROUP = {"w1": 0, "one": 0, "bias": 0, "zero_w": 0, "nograd": 0, "w2": 1, "w3": 1}


def build(cls, params, opts0, opts1, **options):
    return cls(
        [
            {"params": [p for n, p in params.items() if GROUP[n] == k], **opts}
            for k, opts in enumerate((opts0, opts1))
        ],
        lr=opts0["lr"],
        **options,
    )


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
@pytest.mark.parametrize("case", CASES)
def test_matches_per_parameter_reference(case, fused):
    cls, ref_cls, opts0, opts1 = CASES[case]
    grads = gradients()
    a, b = make_params(), make_params()
    opt = build(cls, a, opts0, opts1, fused=fused)
    got = run(opt, a, grads)
    assert opt.implementation == ("fused" if fused else "foreach")
    trace = {}
    want = run(build(ref_cls, b, opts0, opts1), b, grads, trace)
    for name in got:  # float64 both; each step rounds an element at most KERNEL_ROUNDINGS times
        torch.testing.assert_close(got[name], want[name], msg=name, **close_within(
            torch.float64, KERNEL_ROUNDINGS * len(grads), trace["largest"][name]))
    assert not torch.equal(got["w1"], make_params()["w1"]), "the parameters moved"
    assert torch.equal(got["nograd"], make_params()["nograd"])


@pytest.mark.parametrize("case", ["lars", "lamb"])
def test_fused_host_path_in_float32_stays_within_its_rounding_bound_over_100_steps(case):
    """The fused host path in float32 against the (reference-checked) foreach path in float64,
    within the bound float32's roundings allow (tests/bounds.py: steps_bound; measured on the
    development VM: LARS 9.2e-7, LAMB 2.4e-7)."""
    cls, _, opts0, opts1 = CASES[case]
    a, b, trace = make_params(torch.float32), make_params(), {}
    got = run(build(cls, a, opts0, opts1), a, gradients(torch.float32, steps=100, seed=2))
    want = run(build(cls, b, opts0, opts1, fused=False), b, gradients(steps=100, seed=2), trace)
    decay = max(opts0.get("weight_decay", 0), opts1.get("weight_decay", 0))
    # bound: steps_bound; LARS's momentum and LAMB's first moment (β = 0.9) carry 10 steps'
    # roundings; LARS enters lr·r through torch's SGD kernel as 1 − dampening, rounded at the
    # size of g + λw; a trust ratio depends on ‖w‖ (LARS: sensitivity 1; LAMB's ‖w‖/‖u‖ with
    # λw inside u: 2)
    bound = steps_bound(torch.float32, trace["weights"], trace["steps"],
                        roundings=KERNEL_ROUNDINGS, memory=10,
                        gradients=[g + decay * w for g, w in
                                   zip(trace["gradients"], trace["weights"])]
                        if case == "lars" else [],
                        sensitivity=1 if case == "lars" else 2)
    assert_relative_error(got, want, bound)


@pytest.mark.parametrize("case", ["lars", "lamb"])
def test_state_dict_resume_is_exact(case):
    cls, _, opts0, opts1 = CASES[case]
    grads = gradients(torch.float32)
    a = make_params(torch.float32)
    opt = build(cls, a, opts0, opts1)
    run(opt, a, grads[:5])
    saved = copy.deepcopy(opt.state_dict()), {n: p.detach().clone() for n, p in a.items()}
    full = run(opt, a, grads[5:])

    b = make_params(torch.float32, seed=7)
    opt2 = build(cls, b, opts0, opts1)
    with torch.no_grad():
        for n, p in b.items():
            p.copy_(saved[1][n])
    opt2.load_state_dict(saved[0])
    resumed = run(opt2, b, grads[5:])
    for name in full:
        assert torch.equal(full[name], resumed[name]), name


@pytest.mark.parametrize("case", ["lars", "lamb"])
def test_step_never_synchronises_with_the_host(monkeypatch, case):
    """On the path accelerators take; the fused host path reads each layer's norms as numbers."""
    cls, _, opts0, opts1 = CASES[case]
    params = make_params(torch.float32)
    opt = build(cls, params, opts0, opts1, fused=False)
    grads = gradients(torch.float32)
    run(opt, params, grads[:1])

    def refuse(*args, **kwargs):
        raise AssertionError("host synchronisation inside step()")

    for method in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    run(opt, params, grads[1:3])


def test_lamb_group_without_layer_ratio_is_adam_with_l2():
    p = make_params()["w1"]
    q = p.detach().clone().requires_grad_()
    lamb = LAMB([{"params": [p], "layer_ratio": False}], lr=1e-2, eps=1e-8, weight_decay=0.0)
    adam = torch.optim.Adam([q], lr=1e-2, eps=1e-8)
    for g in gradients()[:5]:
        p.grad, q.grad = g["w1"].clone(), g["w1"].clone()
        lamb.step()
        adam.step()
    # float64, 5 steps of Adam's update in another order (16 roundings and 2 stores a step)
    torch.testing.assert_close(p, q, **close_within(torch.float64, 18 * 5, q.abs().max().item()))


@pytest.mark.parametrize("case", ["lars", "lamb"])
def test_deepcopy_keeps_working(case):
    cls, _, opts0, opts1 = CASES[case]
    params = make_params(torch.float32)
    opt = build(cls, params, opts0, opts1)
    run(opt, params, gradients(torch.float32)[:2])
    clone = copy.deepcopy(opt)
    assert clone.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    run(clone, params, gradients(torch.float32)[2:3])


@pytest.mark.parametrize("cls", [LARS, LAMB])
def test_no_parameter_sized_temporaries_after_the_first_step(cls):
    from tests.test_optim_date import steady_state_allocations

    shapes = [(512, 1024), (1024,), (1024, 768)]
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(3)]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    assert steady_state_allocations(cls(params, lr=1e-3, weight_decay=1e-4), params, grads) == []


def test_lamb_on_the_host_keeps_one_scratch_the_size_of_its_largest_layer():
    """The host path writes each layer's update into one shared buffer: LAMB keeps its two
    moments a parameter and that buffer, not a third parameter-sized buffer a parameter."""
    from date_engine.optim.build import state_bytes

    shapes = [(64, 32), (32,), (128, 64), (10, 128)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = LAMB(params, lr=1e-3, weight_decay=1e-4)
    opt.step()
    assert opt.implementation == "fused"
    total = sum(p.numel() for p in params)
    assert state_bytes(opt) == 4 * (2 * total + 128 * 64)


def test_a_layer_with_a_non_finite_gradient_leaves_the_next_layer_s_step_as_it_was():
    """The shared buffer holds an infinite layer's update after its step; the next layer's
    kernel multiplies what it finds by 0, so it must be cleared (0·inf is not 0)."""
    shapes = [(16, 8), (8, 16)]
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) for s in shapes]
    bad = [torch.nn.Parameter(t.clone()) for t in start]
    good = [torch.nn.Parameter(start[1].clone())]
    bad[0].grad, bad[1].grad = torch.full(shapes[0], float("inf")), grads[1].clone()
    good[0].grad = grads[1].clone()
    for params in (bad, good):
        opt = LAMB(params, lr=1e-2, weight_decay=1e-2)
        opt.step()
        assert opt.implementation == "fused"
    assert not torch.isfinite(bad[0]).all()
    assert torch.equal(bad[1], good[0])


def test_the_per_layer_trust_ratio_is_the_tensor_one():
    """LARS and LAMB on the host take trust_ratio_value per layer (in cache, layer after layer);
    it must equal trust_ratio, zero, non-finite and clamped norms included."""
    from date_engine.optim.ratios import trust_ratio, trust_ratio_value

    inf, nan = float("inf"), float("nan")
    w = [2.0, 0.0, 3.0, inf, nan, 0.3, 5.0, 1e-8]
    g = [0.5, 1.0, 0.0, 1.0, 1.0, 0.7, 1e3, 1e-9]
    for options in ({}, dict(weight_decay=1e-2, trust_coefficient=0.02),
                    dict(phi_bounds=(0.5, 2.0)), dict(weight_decay=0.1, phi_bounds=(0.1, 1.0))):
        want = trust_ratio(torch.tensor(w, dtype=torch.float64),
                           torch.tensor(g, dtype=torch.float64), **options).tolist()
        got = [trust_ratio_value(a, b, **options) for a, b in zip(w, g)]
        # bound: the same formula in Python floats and in float64 tensors: ≤ 8 operations each
        assert got == pytest.approx(want, rel=float64_formula(8), nan_ok=True), options


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("case", ["lars", "lars-clipped", "lamb", "lamb-clipped"])
def test_every_dtype_on_both_paths_is_within_its_rounding_bound_of_float64(case, dtype):
    """In float16/bfloat16 the host path may only take torch's fused kernels that compute right
    in that dtype (torch 2.13's fused SGD kernel, LARS's, did not write the parameters there:
    143 units off): the fused and the foreach path are each within the bound of their roundings
    of the float64 reference run from the same rounded values (measured: at most 3.1 units)."""
    from tests.test_optim_date import DTYPE_STEPS, cast, error_of

    cls, ref_cls, opts0, opts1 = CASES[case]
    if dtype in cls.refused_dtypes:
        params = {n: torch.nn.Parameter(v) for n, v in cast(make_params(), dtype).items()}
        with pytest.raises(ValueError, match=str(dtype)):
            run(build(cls, params, opts0, opts1), params, [cast(gradients()[0], dtype)])
        return
    grads64 = gradients(steps=DTYPE_STEPS, seed=3)
    grads = [cast(g, dtype) for g in grads64]
    # bound: each path rounds an element of a step at most KERNEL_ROUNDINGS times in float32,
    # each by at most one unit (u times the parameter's largest entry, which bounds the step and
    # the state in this layout): units(84·5) = 164; in float16 and bfloat16 a norm's sum
    # accumulates in float32 (torch's reductions of half types do), so in the dtype a step
    # rounds its two norms, the ratio (4), the update (16) and its stores (2): units(24·5) = 88,
    # below the 143 units the fused SGD kernel's float16 defect cost LARS
    roundings = KERNEL_ROUNDINGS if dtype == torch.float32 else 24
    bound = units(roundings * DTYPE_STEPS)
    for fused in (True, False):
        params = {n: torch.nn.Parameter(v) for n, v in cast(make_params(), dtype).items()}
        exact = {n: torch.nn.Parameter(p.detach().double().clone()) for n, p in params.items()}
        opt = build(cls, params, opts0, opts1, fused=fused)
        got = run(opt, params, grads)
        want = run(build(ref_cls, exact, opts0, opts1), exact,
                   [{n: None if g is None else g.double() for n, g in s.items()} for s in grads])
        errors = error_of(got, want)
        assert errors.isfinite().all() and (errors <= bound).all(), (fused, errors)


def test_a_spec_s_phi_bounds_let_a_zero_initialised_layer_grow_under_lamb(lenet_raw):
    """LAMB's step of a layer is η·φ(‖w‖)·u/‖u‖: with φ the identity a layer that starts at zero
    (a transformer's zero-initialised head) grows by (1 + η) a step after its first;
    ``phi_bounds`` from the spec reach the optimizer and a lower bound lets it grow."""
    from date_engine import parse_spec
    from date_engine.optim.build import build_optimizer
    from date_engine.plan import derive_plan

    def head_norm_after(optimizer_spec):
        lenet_raw["baseline"]["optimizer"] = optimizer_spec
        lenet_raw["date"] = {"layer_ratio": {"mode": "off"}}
        plan = derive_plan(parse_spec(lenet_raw), 1024)
        torch.manual_seed(0)
        head = torch.nn.Linear(8, 4, bias=False)
        torch.nn.init.zeros_(head.weight)
        opt = build_optimizer(head.named_parameters(), plan.optimizer, lr=1e-3)
        assert [g["phi_bounds"] for g in opt.param_groups] == \
            [plan.optimizer.options["phi_bounds"]]
        x, y = torch.randn(64, 8), torch.randint(0, 4, (64,))
        for _ in range(50):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(head(x), y).backward()
            opt.step()
        return head.weight.norm().item()

    published = head_norm_after({"name": "lamb"})
    bounded = head_norm_after({"name": "lamb", "phi_bounds": [1.0, 10.0]})
    # published: one step of η·‖u‖ while ‖w‖ = 0, then (1 + η) per step; bounded: η per step
    assert published < 0.01 and bounded > 5 * published

"""The LR schedule's shape: warmup → constant → warmdown to final_lr_frac × peak."""

import math

import pytest

from lib.config import load_config
from lib.training.schedule import lr_at, lr_multiplier, peak_lr


def curve(n, **kw):
    return [lr_multiplier(s, n, **kw) for s in range(n)]


@pytest.mark.parametrize("shape", ["cosine", "linear"])
def test_seed_shape_warmup_constant_warmdown(shape):
    n = 100
    c = curve(n, warmup_ratio=0.1, warmdown_ratio=0.5, final_lr_frac=0.1, shape=shape)
    warm, flat, down = c[:10], c[10:50], c[50:]
    assert warm == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert all(x > 0 for x in warm), "no step may run at LR 0"
    assert flat == [1.0] * 40
    assert all(a > b for a, b in zip(down, down[1:])), "warmdown must decrease strictly"
    assert down[0] < 1.0 and down[-1] == pytest.approx(0.1)
    assert min(c) == pytest.approx(0.1)


def test_cosine_and_linear_differ_in_the_middle_only():
    kw = dict(warmup_ratio=0.1, warmdown_ratio=0.5, final_lr_frac=0.1)
    cos, lin = curve(100, shape="cosine", **kw), curve(100, shape="linear", **kw)
    assert cos[:50] == lin[:50] and cos[-1] == pytest.approx(lin[-1])
    # a quarter into the warmdown the cosine is still higher
    assert cos[62] > lin[62]
    assert cos[75] == pytest.approx(lin[75], abs=0.02)  # they cross at the middle
    assert sum(cos[50:]) == pytest.approx(sum(lin[50:]), rel=0.02)


def test_edge_cases():
    assert curve(1, warmup_ratio=0.0, warmdown_ratio=0.0) == [1.0]
    assert curve(1, warmup_ratio=0.0, warmdown_ratio=1.0, final_lr_frac=0.2) == [pytest.approx(0.2)]
    assert curve(10, warmup_ratio=0.0, warmdown_ratio=0.0) == [1.0] * 10
    with pytest.raises(ValueError, match="outside the schedule"):
        lr_multiplier(10, 10)
    with pytest.raises(ValueError, match="warmup_ratio"):
        lr_multiplier(0, 10, warmup_ratio=0.6, warmdown_ratio=0.6)
    with pytest.raises(ValueError, match="shape"):
        lr_multiplier(9, 10, shape="step")


def test_peak_is_parent_original_lr_times_scale_and_lr_at_uses_training_config():
    cfg = load_config(preset="tiny")
    peak = peak_lr(3e-3, cfg.training.lr_scale)
    assert peak == pytest.approx(3e-3 * 0.3)
    t = cfg.training
    lrs = [lr_at(s, peak, t) for s in range(t.num_iterations)]
    assert max(lrs) == pytest.approx(peak)
    assert lrs[-1] == pytest.approx(peak * t.final_lr_frac)
    assert math.isclose(lrs[0], peak / round(t.warmup_ratio * t.num_iterations))
    with pytest.raises(ValueError, match="original_lr"):
        peak_lr(0.0, 0.1)

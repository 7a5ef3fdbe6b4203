"""Tests of the numpy-only reward-correction core (hand-computed values and the effects each piece exists for)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from vla_wmrl.correction import (
    AnchorWeight,
    CorrectionConfig,
    ImaginationGap,
    ImaginationRanking,
    MonotoneCalibrator,
    RewardCorrector,
    centred_squared_error,
    disagreement_terms,
    group_advantages,
    inverse_variance_weights,
    normalised_disagreement,
    num_anchors,
    pool_adjacent_violators,
    rank_matched_pairs,
    signal_variance,
    to_unit,
)


def toy_grader(r, sigma, rng):
    return np.clip(0.25 + 0.55 * r + 0.2 * r**2 + rng.normal(0.0, sigma, np.shape(r)), 0.0, 1.0)


def fitted_calibrator(sigma, rng, n_batches=80):
    cal = MonotoneCalibrator()
    for _ in range(n_batches):
        r = rng.uniform(0, 1, 64)
        cal.add(toy_grader(r, sigma, rng), r)
    return cal


def test_import_does_not_import_torch():
    code = "import sys, vla_wmrl.correction; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------------------ calibrator
def test_pool_adjacent_violators_hand_values():
    np.testing.assert_allclose(pool_adjacent_violators(np.array([1.0, 3, 2, 4]), np.ones(4)), [1, 2.5, 2.5, 4])
    # weighted: (3 * 1 + 2 * 3) / 4 = 2.25
    np.testing.assert_allclose(pool_adjacent_violators(np.array([1.0, 3, 2]), np.array([1.0, 1, 3])), [1, 2.25, 2.25])


def test_calibrator_identity_until_fitted_then_refit_cadence():
    cal = MonotoneCalibrator(min_pairs=200, refit_every=64)
    x = np.linspace(0, 1, 7)
    cal.add(np.full(199, 0.5), np.zeros(199))
    assert not cal.fitted
    np.testing.assert_array_equal(cal(x), x)
    cal.add(np.array([0.95]), np.array([1.0]))  # 200th pair -> first fit
    assert cal.fitted and cal.n_fits == 1
    cal.add(np.full(63, 0.1), np.zeros(63))
    assert cal.n_fits == 1
    cal.add(np.array([0.1]), np.array([0.0]))  # 64 new pairs -> refit
    assert cal.n_fits == 2


def test_calibrator_fit_hand_values_and_buffer_cap():
    cal = MonotoneCalibrator(buffer_size=6, min_pairs=6, refit_every=1, num_bins=10)
    # bins 1, 1, 5, 5, 8, 8: mean preds 0.15, 0.55, 0.85; mean reals 0.4, 0.2, 0.9 -> PAV (0.3, 0.3, 0.9)
    cal.add(np.array([0.12, 0.18, 0.52, 0.58, 0.82, 0.88]), np.array([0.3, 0.5, 0.1, 0.3, 0.8, 1.0]))
    np.testing.assert_allclose(cal.knots_x, [0.15, 0.55, 0.85])
    np.testing.assert_allclose(cal.knots_y, [0.3, 0.3, 0.9])
    # interpolation between knots, clamped outside them
    np.testing.assert_allclose(cal(np.array([0.0, 0.35, 0.7, 1.0])), [0.3, 0.3, 0.6, 0.9])
    cal.add(np.array([0.05]), np.array([0.0]))
    assert cal.pred.size == 6 and cal.pred[-1] == 0.05 and cal.pred[0] == 0.18  # FIFO dropped the oldest


def test_fitted_map_is_monotone_and_not_affine():
    rng = np.random.default_rng(0)
    cal = MonotoneCalibrator()
    for _ in range(40):
        r = rng.uniform(0, 1, 64)
        cal.add(np.clip(r**3 + rng.normal(0, 0.1, 64), 0, 1), r)  # noisy, strongly convex bias
    y = cal(np.linspace(0, 1, 501))
    assert np.all(np.diff(y) >= 0)
    x = np.linspace(0.05, 0.95, 50)
    yx = cal(x)
    residual = yx - np.polyval(np.polyfit(x, yx, 1), x)
    assert np.abs(residual).max() > 0.05  # a linear map could not express it


@pytest.mark.parametrize("sigma,target", [(0.005, 0.90), (0.05, 0.40)])
def test_toy_grader_bias_removed(sigma, target):
    rng = np.random.default_rng(1)
    cal = fitted_calibrator(sigma, rng)
    r = rng.uniform(0, 1, 20000)  # fresh samples, not the buffer
    p = toy_grader(r, sigma, rng)
    removed = 1.0 - centred_squared_error(cal(p), r) / centred_squared_error(p, r)
    assert removed > target
    assert cal.bias_removed > target  # the logged in-buffer estimate agrees


def test_calibration_survives_group_standardisation():
    """A non-affine bias changes within-group advantages; the calibrated ones match the true ones better."""
    rng = np.random.default_rng(2)
    corr = RewardCorrector(CorrectionConfig(denoise=False))
    n_groups, G = 20, 8
    steps = [rng.uniform(0, 1, (n_groups, G)) for _ in range(15)]
    for r in steps:  # every group an anchor: fill the buffer
        corr.process(r**2, r, np.ones(n_groups, bool))
    assert corr.stats()["fitted"] == 1.0
    r = rng.uniform(0, 1, (n_groups, G))
    out = corr.process(r**2, None, np.zeros(n_groups, bool))
    a_true, _ = group_advantages(r, np.ones_like(r, bool))
    a_raw, _ = group_advantages(r**2, np.ones_like(r, bool))
    err_raw = np.mean((a_raw - a_true) ** 2)
    err_corr = np.mean((out.advantages - a_true) ** 2)
    assert np.abs(out.advantages - a_raw).max() > 0.1  # calibration changed the advantages ...
    assert err_corr < 0.3 * err_raw  # ... towards the true-reward ones


# ------------------------------------------------------------------------------------------------------ denoising
def test_normalised_disagreement_hand_value_and_degenerate_groups():
    # f centred (-.5, 0, .5), r centred (-1/3, 2/3, -1/3): mean sq diff 7/18, Var(r) 2/9 -> 1.75
    assert normalised_disagreement(np.array([0, 0.5, 1]), np.array([0.0, 1, 0])) == pytest.approx(1.75)
    assert normalised_disagreement(np.array([0.2, 0.9]), np.array([1.0, 1.0])) is None  # Var(r) = 0
    assert normalised_disagreement(np.array([0.2]), np.array([1.0])) is None


def test_anchor_weight_ema_freeze_and_clip():
    aw = AnchorWeight(w_target=2.0, w_max=4.0, half_life=1.0, freeze_after=2)
    aw.observe(1.0)
    assert aw.weight == 1.0 and aw.D == 1.0
    aw.observe(3.0)  # half-life 1 -> alpha 0.5: D = 2, c = 1 / 2 frozen
    assert aw.D == pytest.approx(2.0) and aw.c == pytest.approx(0.5) and aw.weight == pytest.approx(2.0)
    aw.observe(6.0)  # D = 4 -> w = 3
    assert aw.weight == pytest.approx(3.0)
    aw.observe(100.0)  # w = 1 + 0.5 * 52 -> clipped to w_max
    assert aw.weight == 4.0
    for _ in range(30):
        aw.observe(0.0)  # D -> 0: clipped at 1
    assert aw.weight == pytest.approx(1.0, abs=1e-6) and aw.weight >= 1.0


def test_anchor_weight_one_before_calibration_and_bounded_after():
    rng = np.random.default_rng(3)
    cfg = CorrectionConfig(w_max=4.0)
    corr = RewardCorrector(cfg)
    seen = []
    for _ in range(60):
        anchor = corr.select_anchors(32, rng)
        r = rng.uniform(0, 1, (32, 8))
        p = toy_grader(r, 0.1, rng)
        fitted_before = corr.stats()["fitted"] if corr.n_steps else 0.0
        out = corr.process(p, np.where(anchor[:, None], r, np.nan), anchor, pred_var=np.full(p.shape, 0.01))
        w = corr.stats()["anchor_weight"]
        seen.append(w)
        if not fitted_before:
            assert w == 1.0
            np.testing.assert_array_equal(out.weights[anchor], 1.0)
        assert 1.0 <= w <= cfg.w_max
        np.testing.assert_allclose(out.weights[anchor][out.valid[anchor]], w)
    assert corr.stats()["c_frozen"] == 1.0 and max(seen) > 1.0


def test_inverse_variance_weights_hand_values():
    w = inverse_variance_weights(np.array([0.001, 0.003, 5.0]), np.array([True, True, False]), eps=0.001)
    np.testing.assert_allclose(w, [4 / 3, 2 / 3, 0.0])  # 1/(var+eps) = 500, 250; mean 375


def test_imagined_weights_mean_one_and_anchor_rows_untouched():
    corr = RewardCorrector(CorrectionConfig())
    rng = np.random.default_rng(4)
    p = rng.uniform(0, 1, (5, 4))
    var = rng.uniform(0.001, 0.05, (5, 4))
    anchor = np.array([True, False, False, False, False])
    out = corr.process(p, np.where(anchor[:, None], p, np.nan), anchor, pred_var=var)
    assert out.weights[1:].mean() == pytest.approx(1.0)
    np.testing.assert_array_equal(out.weights[0], 1.0)
    assert np.argmax(out.weights[1:]) == np.argmin(var[1:])  # least certain counts least


# ----------------------------------------------------------------------------------------------------- advantages
def test_group_advantages_hand_values():
    adv, valid = group_advantages(np.array([[0.0, 1, 2, 3]]), np.ones((1, 4), bool), eps=0.0)
    np.testing.assert_allclose(adv[0], (np.arange(4) - 1.5) / np.sqrt(1.25))
    assert valid.all()


def test_ungraded_rollouts_excluded_not_scored_zero():
    scores = np.array([[1.0, 0.5, np.nan]])
    graded = np.array([[True, True, False]])
    corr = RewardCorrector(CorrectionConfig(debias=False, denoise=False))
    out = corr.process(scores, None, np.zeros(1, bool), graded=graded)
    a = 0.25 / (0.25 + 1e-4)  # mean 0.75, std 0.25 over the two graded rollouts
    np.testing.assert_allclose(out.advantages[0], [a, -a, 0.0])
    assert out.valid.tolist() == [[True, True, False]] and out.weights[0, 2] == 0.0
    as_zero, _ = group_advantages(np.array([[1.0, 0.5, 0.0]]), np.ones((1, 3), bool))
    assert not np.allclose(out.advantages, as_zero)  # scoring it 0 would have given different advantages
    assert corr.stats()["n_ungraded"] == 1.0


def test_degenerate_groups_ignored():
    corr = RewardCorrector(CorrectionConfig())
    graded = np.array([[True, False, False], [True, True, True], [False, False, False]])
    out = corr.process(np.array([[0.3, 0, 0], [0.1, 0.5, 0.9], [0, 0, 0]]), None, np.zeros(3, bool), graded=graded)
    assert not out.valid[0].any() and not out.valid[2].any() and out.valid[1].all()
    np.testing.assert_array_equal(out.advantages[[0, 2]], 0.0)
    assert corr.stats()["n_skipped_groups"] == 1.0  # group 0 (group 2 has no scores at all)
    # a constant anchor group (Var(r) = 0) does not move the disagreement average
    corr = RewardCorrector(CorrectionConfig(min_pairs=2))
    corr.process(np.array([[0.2, 0.8]]), np.array([[0.0, 1.0]]), np.ones(1, bool))  # fits
    corr.process(np.array([[0.2, 0.8]]), np.array([[1.0, 1.0]]), np.ones(1, bool))
    assert corr.stats()["n_disagreement_obs"] == 0.0


def test_length_normaliser():
    corr = RewardCorrector(CorrectionConfig(normaliser="length", denoise=False))
    out = corr.process(np.array([[0.0, 1.0]]), None, np.zeros(1, bool), lengths=np.array([[10, 40]]))
    np.testing.assert_allclose(out.weights, [[0.1, 0.025]])
    with pytest.raises(ValueError, match="lengths"):
        corr.process(np.array([[0.0, 1.0]]), None, np.zeros(1, bool))


# ---------------------------------------------------------------------------------------------------- anchors
def test_anchor_counts():
    assert num_anchors(64, 0.1, 1) == 6
    assert num_anchors(5, 0.1, 1) == 1
    assert num_anchors(64, 0.5, 1, max_anchors=4) == 4
    corr = RewardCorrector(CorrectionConfig(anchor_fraction=0.25, min_anchors=2))
    mask = corr.select_anchors(16, np.random.default_rng(0))
    assert mask.dtype == bool and mask.sum() == 4


# ------------------------------------------------------------------------------------------------ bad input, state
def test_nan_and_inf_scores_name_the_group():
    corr = RewardCorrector()
    p = np.full((5, 4), 0.5)
    p[3, 1] = np.nan
    with pytest.raises(ValueError, match="group 3"):
        corr.process(p, None, np.zeros(5, bool))
    real = np.full((5, 4), np.nan)  # NaN off the anchor rows is fine
    real[1] = [0, 1, np.inf, 0]
    with pytest.raises(ValueError, match="real_scores.*group 1"):
        corr.process(np.full((5, 4), 0.5), real, np.array([False, True, False, False, False]))
    graded = np.ones((5, 4), bool)
    graded[3, 1] = False  # the same NaN on an ungraded rollout is accepted
    corr.process(p, None, np.zeros(5, bool), graded=graded)


def test_out_of_domain_scores_clipped_and_counted_lower_is_better():
    u, n = to_unit(np.array([2.0, 12.0, -1.0]), (0.0, 10.0), higher_is_better=False)
    np.testing.assert_allclose(u, [0.8, 0.0, 1.0])
    assert n == 2
    corr = RewardCorrector(CorrectionConfig(score_range=(0.0, 10.0), higher_is_better=False))
    out = corr.process(np.array([[2.0, 12.0, 5.0]]), None, np.zeros(1, bool))
    assert corr.stats()["n_clipped"] == 1.0 and corr.stats()["n_clipped_total"] == 1.0
    assert out.advantages[0, 0] > 0 > out.advantages[0, 1]  # lower loss -> positive advantage
    # ungraded positions and non-anchor real scores are not counted, whatever they hold
    corr = RewardCorrector(CorrectionConfig(score_range=(2.0, 4.0), higher_is_better=False))
    pred = np.array([[2.5, 3.0, np.nan], [3.5, 4.5, 2.0]])
    real = np.array([[2.4, 3.1, 3.0], [np.nan, np.nan, np.nan]])
    corr.process(pred, real, np.array([True, False]), graded=~np.isnan(pred))
    assert corr.stats()["n_clipped"] == 1.0  # only the 4.5


def test_state_round_trip_gives_identical_outputs():
    cfg = CorrectionConfig(per_task=True, min_pairs=50, refit_every=16, freeze_after=4)
    rng = np.random.default_rng(5)

    def batch():
        r = rng.uniform(0, 1, (12, 6))
        anchor = np.zeros(12, bool)
        anchor[rng.choice(12, 3, replace=False)] = True
        return dict(
            pred_scores=toy_grader(r, 0.05, rng),
            real_scores=np.where(anchor[:, None], r, np.nan),
            anchor_mask=anchor,
            pred_var=rng.uniform(0.001, 0.01, r.shape),
            task_ids=rng.integers(0, 2, 12),
        )

    a = RewardCorrector(cfg)
    for _ in range(12):
        a.process(**batch())
    b = RewardCorrector(cfg)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    np.testing.assert_equal(a.stats(), b.stats())  # NaN-aware: the ranking correlation is NaN until measured
    for _ in range(5):
        inputs = batch()
        out_a, out_b = a.process(**inputs), b.process(**inputs)
        for field in ("advantages", "weights", "valid"):
            np.testing.assert_array_equal(getattr(out_a, field), getattr(out_b, field))
    np.testing.assert_equal(a.stats(), b.stats())
    assert a.stats()["fitted"] == 1.0 and a.stats()["c_frozen"] == 1.0 and np.isnan(a.stats()["imagination_rank_corr"])


def test_calibration_map_keeps_world_model_order():
    """The corrector's map extrapolates the end segments and is strictly increasing: it never turns distinct
    predictions into ties (which would erase the only thing GRPO uses, the within-group order)."""
    cal = MonotoneCalibrator(buffer_size=6, min_pairs=6, refit_every=1, num_bins=10)
    cal.add(np.array([0.12, 0.18, 0.52, 0.58, 0.82, 0.88]), np.array([0.3, 0.5, 0.1, 0.3, 0.8, 1.0]))
    p = np.array([0.0, 0.35, 0.7, 0.9, 1.0])  # knots (0.15, 0.3), (0.55, 0.3), (0.85, 0.9)
    np.testing.assert_allclose(cal(p), [0.3, 0.3, 0.6, 0.9, 0.9])  # reference: clamped ends, flat PAV segment
    # end slopes 0 and 2: 0.9 -> 0.9 + 2 * 0.05 = 1.0; 1.0 -> 1.2, clipped to 1
    np.testing.assert_allclose(cal(p, extrapolate=True), [0.3, 0.3, 0.6, 1.0, 1.0])
    np.testing.assert_allclose(cal(p, extrapolate=True, min_slope=0.05), 0.95 * np.array([0.3, 0.3, 0.6, 1.0, 1.0]) + 0.05 * p)

    # An over-confident world model: most predictions of good actions pile up above the top bin's mean prediction.
    rng = np.random.default_rng(5)
    truth = lambda n: rng.uniform(0, 1, n)
    grader = lambda r: 1.0 / (1.0 + np.exp(-8.0 * (r - 0.5)))
    ref = RewardCorrector(CorrectionConfig(denoise=False, calibration_extrapolate=False, calibration_min_slope=0.0))
    new = RewardCorrector(CorrectionConfig(denoise=False))
    for _ in range(10):
        r = truth((16, 8))
        for corr in (ref, new):
            corr.process(grader(r), (rng.random(r.shape) < r).astype(float), np.ones(16, bool))  # binary outcomes
    r = rng.uniform(0.8, 1.0, (16, 8))  # a group of good actions each
    ties = lambda s: np.mean([np.unique(row).size < row.size for row in s])
    out_ref = ref.process(grader(r), None, np.zeros(16, bool))
    out_new = new.process(grader(r), None, np.zeros(16, bool))
    assert ties(out_ref.scores) > 0.5  # the reference map flattens most of these groups ...
    assert ties(out_new.scores) == 0.0  # ... the default map keeps every group's order
    np.testing.assert_array_equal(np.argsort(out_new.scores, 1), np.argsort(grader(r), 1))
    assert np.mean(np.abs(out_new.advantages - group_advantages(r, np.ones_like(r, bool))[0])) < np.mean(
        np.abs(out_ref.advantages - group_advantages(r, np.ones_like(r, bool))[0])
    )


# ------------------------------------------------------------------------------- uncertainty-aware calibration
def optimistic_where_unsure(rng, n):
    """Truth P, reported sd s, and a world model that is optimistic by 2 s (model exploitation where data are scarce)."""
    P = rng.uniform(0.1, 0.9, n)
    s = rng.uniform(0.0, 0.15, n)
    return P, s, np.clip(P + 2.0 * s + rng.normal(0, 0.01, n), 0, 1)


def test_uncertainty_term_learns_penalty_and_reorders_a_group():
    rng = np.random.default_rng(6)
    cal = MonotoneCalibrator(uncertainty=True)
    for _ in range(40):
        P, s, p = optimistic_where_unsure(rng, 64)
        cal.add(p, (rng.random(64) < P).astype(float), s)  # binary outcomes
    assert -2.6 < cal.sd_slope < -1.4  # the optimism, measured on the anchors
    # a sure rollout (p 0.7, truly 0.7) and an unsure, optimistic one (p 0.8, truly 0.5): a map of p alone keeps
    # the wrong order; the uncertainty term fixes it
    p, s = np.array([0.7, 0.8]), np.array([0.0, 0.15])
    assert np.diff(cal(p, True, 0.05))[0] > 0 and np.diff(cal(p, True, 0.05, sd=s))[0] < 0
    # without an sd the term is not applied; calibrators fitted without ``uncertainty`` ignore it
    np.testing.assert_array_equal(cal(p), MonotoneCalibrator.__call__(cal, p))
    plain = MonotoneCalibrator()
    P, s, p = optimistic_where_unsure(rng, 300)
    plain.add(p, P, s)
    assert plain.fitted and plain.sd_slope == 0.0


def test_uncertainty_term_shrinks_to_zero_when_sd_carries_no_bias():
    rng = np.random.default_rng(7)
    cal = MonotoneCalibrator(uncertainty=True)
    for _ in range(40):
        P = rng.uniform(0.1, 0.9, 64)
        cal.add(P, (rng.random(64) < P).astype(float), rng.uniform(0, 0.15, 64))  # sd unrelated to the error
    assert abs(cal.sd_slope) < 0.3  # a slope the buffer cannot tell from 0 is (mostly) shrunk away


def test_uncertainty_calibration_improves_within_group_advantages():
    rng = np.random.default_rng(8)
    cfgs = {u: CorrectionConfig(denoise=False, calibration_uncertainty=u) for u in (False, True)}
    corrs = {u: RewardCorrector(c) for u, c in cfgs.items()}
    for _ in range(30):
        P, s, p = (x.reshape(16, 8) for x in optimistic_where_unsure(rng, 128))
        for c in corrs.values():
            c.process(p, (rng.random(P.shape) < P).astype(float), np.ones(16, bool), pred_var=s**2)
    P, s, p = (x.reshape(16, 8) for x in optimistic_where_unsure(rng, 128))
    a_true = group_advantages(P, np.ones_like(P, bool))[0]
    err = {u: np.mean((c.process(p, None, np.zeros(16, bool), pred_var=s**2).advantages - a_true) ** 2)
           for u, c in corrs.items()}
    assert err[True] < 0.5 * err[False]
    assert corrs[True].stats()["uncertainty_slope"] < -1.0 and corrs[False].stats()["uncertainty_slope"] == 0.0


def test_uncertainty_state_round_trip_and_old_states_load():
    rng = np.random.default_rng(9)
    cal = MonotoneCalibrator(uncertainty=True, min_pairs=100)
    P, s, p = optimistic_where_unsure(rng, 300)
    cal.add(p, P, s)
    other = MonotoneCalibrator(uncertainty=True)
    other.load_state_dict(json.loads(json.dumps(cal.state_dict())))
    np.testing.assert_array_equal(other(p, True, 0.05, sd=s), cal(p, True, 0.05, sd=s))
    old = {k: v for k, v in cal.state_dict().items() if k not in ("sd", "sd_slope", "sd_ref")}  # saved before the term
    other.load_state_dict(old)
    assert other.sd_slope == 0.0 and other.sd.size == other.pred.size


# ------------------------------------------------------------------------------- outcome noise, reliability weights
def test_disagreement_net_of_known_outcome_noise():
    # noisy real reward (sd 0.3): the raw disagreement is mostly outcome noise; net of the known noise it is the world
    # model's own error, 0 for a perfect world model and e2 / Var(r) for one with error sd 0.2
    rng = np.random.default_rng(10)
    raw, net, noisy_wm = [], [], []
    for _ in range(4000):
        P = rng.uniform(0, 1, 8)
        r = P + rng.normal(0, 0.3, 8)
        raw.append(normalised_disagreement(P, r))
        net.append(disagreement_terms(P, r, noise=np.full(8, 0.09)))
        noisy_wm.append(disagreement_terms(P + rng.normal(0, 0.2, 8), r, noise=np.full(8, 0.09)))
    ratio_of_means = lambda terms: np.mean([t[0] for t in terms]) / np.mean([t[1] for t in terms])
    expected = 0.04 / (1 / 12 + 0.09)  # E[e2] / E[Var(r)], the (n - 1) / n factors cancel
    assert np.mean(raw) > 0.5 and abs(ratio_of_means(net)) < 0.01
    assert ratio_of_means(noisy_wm) == pytest.approx(expected, rel=0.1)
    # hand values: f = r exactly, declared noise 0.1 on 2 samples: numerator 0 - 1/2 * 0.1, Var(r) 0.25
    assert disagreement_terms(np.array([0.0, 1.0]), np.array([0.0, 1.0]), noise=np.full(2, 0.1)) == pytest.approx((-0.05, 0.25))
    aw = AnchorWeight(half_life=1.0, freeze_after=2)
    aw.observe_terms(-0.05, 0.25)
    assert aw.D == 0.0  # a negative average error counts as 0
    aw.observe_terms(0.45, 0.25)  # averages 0.2 and 0.25
    assert aw.D == pytest.approx(0.8) and aw.c == pytest.approx(1 / 0.8)


def test_outcome_noise_config_and_real_var_feed_the_anchor_weight():
    rng = np.random.default_rng(11)
    corr = {k: RewardCorrector(CorrectionConfig(min_pairs=50, freeze_after=4, **kw))
            for k, kw in (("exact", {}), ("declared", {"outcome_noise_var": 0.09}), ("per_rollout", {}))}
    for _ in range(20):
        P = rng.uniform(0, 1, (4, 8))
        r = P + rng.normal(0, 0.3, P.shape)
        for k, c in corr.items():
            c.process(P, r, np.ones(4, bool), real_var=np.full(P.shape, 0.09) if k == "per_rollout" else None)
    d = {k: c.stats()["disagreement"] for k, c in corr.items()}
    assert d["declared"] == pytest.approx(d["per_rollout"]) and d["declared"] < 0.3 * d["exact"]
    with pytest.raises(ValueError, match="real_var"):
        corr["exact"].process(P, r, np.ones(4, bool), real_var=np.full(P.shape, -1.0))


def test_signal_variance_hand_value():
    scores = np.array([[0.0, 1.0, 0.5], [0.2, 0.4, 9.0]])
    var = np.array([[0.03, 0.03, 0.03], [0.01, 0.01, 9.0]])
    mask = np.array([[True, True, True], [True, True, False]])
    # group 0: Var 1/6, noise 2/3 * 0.03 = 0.02; group 1: Var 0.01, noise 1/2 * 0.01 = 0.005
    assert signal_variance(scores, var, mask) == pytest.approx(((1 / 6 - 0.02) + (0.01 - 0.005)) / 2)
    assert signal_variance(scores, var, np.zeros_like(mask)) == 0.0


@pytest.mark.parametrize("spread", [0.3, 0.01])
def test_reliability_weights_track_true_advantages_at_any_signal_scale(spread):
    """Scores = truth + noise of known, varying variance. Weighting by the reliability tau2 / (tau2 + v) (the posterior
    shrinkage of each centred score) recovers the true advantages better than 1 / (v + eps) with a fixed eps, whose
    fit depends on how eps compares with the signal's spread."""
    rng = np.random.default_rng(12)
    P = rng.normal(0.5, spread, (400, 8))
    v = (spread * 10 ** rng.uniform(-1.5, 0.5, P.shape)) ** 2  # per-sample noise sd from 3% to 300% of the spread
    p = P + rng.normal(0, 1, P.shape) * np.sqrt(v)
    a_true = group_advantages(P, np.ones_like(P, bool))[0]

    def cosine(mode):
        out = RewardCorrector(CorrectionConfig(debias=False, sample_weighting=mode, score_range=(-1.0, 2.0))).process(
            p, None, np.zeros(400, bool), pred_var=v
        )
        g = out.weights * out.advantages
        return np.mean(np.sum(g * a_true, 1) / np.linalg.norm(g, axis=1) / np.linalg.norm(a_true, axis=1))

    cos = {m: cosine(m) for m in ("inverse_variance", "reliability")}
    unweighted = np.mean(np.sum(group_advantages(p, np.ones_like(p, bool))[0] * a_true, 1) / 8)
    assert cos["reliability"] > cos["inverse_variance"] and cos["reliability"] > unweighted


def test_calibrator_slope_hand_values():
    cal = MonotoneCalibrator(buffer_size=6, min_pairs=6, refit_every=1, num_bins=10)
    np.testing.assert_array_equal(cal.slope(np.array([0.2, 0.9])), [1.0, 1.0])  # identity until fitted
    cal.add(np.array([0.12, 0.18, 0.52, 0.58, 0.82, 0.88]), np.array([0.3, 0.5, 0.1, 0.3, 0.8, 1.0]))
    # knots (0.15, 0.3), (0.55, 0.3), (0.85, 0.9): slopes 0 then 2
    np.testing.assert_allclose(cal.slope(np.array([0.35, 0.7])), [0.0, 2.0], atol=1e-9)
    np.testing.assert_allclose(cal.slope(np.array([0.35, 0.7]), min_slope=0.05), [0.05, 0.95 * 2 + 0.05], atol=1e-9)


def test_reliability_and_shrinkage_weights_hand_values():
    p = np.array([[0.2, 0.4, 0.6, 0.8]])
    v = np.array([[0.0, 0.01, 0.01, 0.04]])
    tau2 = signal_variance(p, v, np.ones_like(p, bool))  # Var 0.05 - 3/4 * 0.015 = 0.03875
    rel = 1.0 / (v + tau2)
    for mode, expected in (("reliability", rel / rel.mean()), ("shrinkage", tau2 * rel)):
        corr = RewardCorrector(CorrectionConfig(debias=False, sample_weighting=mode))
        out = corr.process(p, None, np.zeros(1, bool), pred_var=v)
        np.testing.assert_allclose(out.weights, expected)
        assert corr.stats()["signal_var"] == pytest.approx(tau2)
    assert (tau2 * rel).max() == 1.0  # shrinkage: a noiseless sample has weight 1, the others less
    with pytest.raises(ValueError, match="sample_weighting"):
        CorrectionConfig(sample_weighting="inverse")


def test_outcome_scaled_advantages_equal_std_for_binary_and_damp_near_zero_probabilities():
    from vla_wmrl.correction.advantages import group_advantages

    rng = np.random.default_rng(0)
    binary = (rng.random((50, 8)) < 0.3).astype(float)
    graded = np.ones_like(binary, bool)
    a_std, _ = group_advantages(binary, graded, scale="std")
    a_out, _ = group_advantages(binary, graded, scale="outcome")
    assert np.allclose(a_std, a_out)  # identical on real 0/1 outcomes
    tiny = 0.001 + 0.001 * rng.random((50, 8))  # a world model predicting "almost surely fails" with jitter
    a_std, _ = group_advantages(tiny, graded, scale="std")
    a_out, _ = group_advantages(tiny, graded, scale="outcome")
    assert np.abs(a_std).max() > 1.0 and np.abs(a_out).max() < 0.05  # noise no longer amplified to +-1
    one_hit = np.array([[0.6] + [0.01] * 7])
    a_out, _ = group_advantages(one_hit, np.ones_like(one_hit, bool), scale="outcome")
    assert a_out[0, 0] > 1.5  # a confident predicted success still stands out
    with pytest.raises(ValueError, match="valid"):
        group_advantages(tiny, graded, scale="z")


def test_imagination_gap_trust_hand_values():
    gap = ImaginationGap(tolerance=0.2, half_life=1.0)
    assert gap.trust == 1.0  # nothing observed yet
    gap.observe(0.1)
    assert gap.gap == pytest.approx(0.1) and gap.trust == 1.0
    gap.observe(0.5)  # half-life 1: the average moves half-way
    assert gap.gap == pytest.approx(0.3) and gap.trust == pytest.approx(0.5)
    gap.observe(0.9)
    assert gap.trust == 0.0
    for _ in range(10):  # recovers once imagination stops over-promising
        gap.observe(-0.2)
    assert gap.trust == 1.0
    assert ImaginationGap(None).trust == 1.0


def _gap_trusts(z, over_promise, groups=300, seed=0):
    """Trust after each anchor group of 8 binary outcomes whose imagined scores over-promise by ``over_promise``,
    fed through the corrector as the trainer does (closed-loop imagined scores of the anchor groups' start states)."""
    rng = np.random.default_rng(seed)
    corr = RewardCorrector(CorrectionConfig(gap_tolerance=0.15, gap_half_life=2.0, gap_z=z, min_pairs=10**6))
    trusts = []
    for _ in range(groups):
        q = rng.uniform(0.2, 0.6, 2)
        real = (rng.random((2, 8)) < q[:, None]).astype(float)
        check = np.full((2, 8), np.nan)
        check[0] = np.clip(q[0] + over_promise + rng.normal(0, 0.25, 8), 0, 1)
        corr.process(rng.uniform(0, 1, (2, 8)), real, np.array([True, False]), anchor_imagined=check)
        trusts.append(corr.stats()["imagination_trust"])
    return np.array(trusts), corr


def test_imagination_gap_standard_error_matches_the_averages_scatter():
    rng = np.random.default_rng(1)
    gap, averages, ses = ImaginationGap(tolerance=0.2, half_life=2.0, z=1.0), [], []
    for _ in range(4000):
        sd = rng.uniform(0.1, 0.3)  # each group's own sampling noise
        gap.observe(float(rng.normal(0.05, sd)), sd**2)
        averages.append(gap.gap)
        ses.append(gap.stderr)
    # the reported standard error is the spread the average actually has
    assert np.sqrt(np.mean(np.square(ses[100:]))) == pytest.approx(np.std(averages[100:]), rel=0.1)
    again = ImaginationGap(tolerance=0.2, half_life=2.0, z=1.0)
    again.load_state_dict(json.loads(json.dumps(gap.state_dict())))
    assert again.stderr == gap.stderr and again.trust == gap.trust
    with pytest.raises(ValueError, match="gap_z"):
        CorrectionConfig(gap_z=-1.0)


def test_noise_aware_imagination_gap_ignores_outcome_noise_but_still_stops_exploitation():
    # imagination over-promises by 0.1, under the 0.15 tolerance: the plain average still crosses it often, from
    # the noise of 8 binary outcomes alone; its lower confidence bound rarely does
    plain = np.mean([(_gap_trusts(0.0, 0.1, seed=s)[0] < 1).mean() for s in range(5)])
    aware, corr = _gap_trusts(1.0, 0.1)
    assert plain > 0.15 and (aware < 1).mean() < plain / 2
    assert 0.05 < corr.stats()["imagination_gap_se"] < 0.15
    # imagination that over-promises by 0.5 (past twice the tolerance) is still turned down on almost every group;
    # the price of the bound is a later reaction to gaps near the tolerance (docs/correction.md)
    exploited = np.concatenate([_gap_trusts(1.0, 0.5, groups=100, seed=s)[0] for s in range(5)])
    assert exploited.mean() < 0.1 and (exploited < 0.5).mean() > 0.9


def _exploit_step(corr, rng, optimism):
    """One step: group 0 is an anchor whose closed-loop imagined scores are `optimism` above its real outcomes."""
    pred = rng.uniform(0, 1, (4, 8))
    real = (rng.uniform(0, 1, (4, 8)) < 0.3).astype(float)
    check = np.full((4, 8), np.nan)
    check[0] = np.clip(real[0].mean() + optimism + rng.normal(0, 0.05, 8), 0, 1)
    return corr.process(pred, real, np.array([True, False, False, False]), anchor_imagined=check)


def test_imagination_gap_switches_off_an_exploited_imagined_stream_and_only_with_denoise():
    rng = np.random.default_rng(0)
    on = RewardCorrector(CorrectionConfig(gap_tolerance=0.2, gap_half_life=2.0, min_pairs=10**6))
    honest = _exploit_step(on, rng, 0.0)
    assert on.stats()["imagination_trust"] == 1.0 and honest.valid[1:].any()
    for _ in range(5):
        out = _exploit_step(on, rng, 0.6)
    stats = on.stats()
    assert stats["imagination_gap"] > 0.4 and stats["imagination_trust"] == 0.0
    assert not out.valid[1:].any() and (out.weights[1:] == 0).all() and (out.advantages[1:] == 0).all()
    assert out.valid[0].any()  # the real anchor group still trains
    off = RewardCorrector(CorrectionConfig(gap_tolerance=0.2, denoise=False, min_pairs=10**6))
    for _ in range(5):
        out = _exploit_step(off, rng, 0.6)
    assert off.stats()["imagination_trust"] == 1.0 and out.valid[1:].any()
    # round trip keeps the average
    again = RewardCorrector(on.config)
    again.load_state_dict(json.loads(json.dumps(on.state_dict())))
    assert again.stats()["imagination_gap"] == stats["imagination_gap"]
    with pytest.raises(ValueError, match="anchor group 0"):
        bad = np.full((4, 8), np.nan)
        bad[0, :3] = 0.5
        on.process(rng.uniform(0, 1, (4, 8)), np.zeros((4, 8)), np.array([True, False, False, False]),
                   anchor_imagined=bad)


def test_imagination_ranking_is_the_pooled_within_group_advantage_correlation():
    rng = np.random.default_rng(0)
    rank, zs, zo = ImaginationRanking(floor=0.3, half_life=1e9, min_groups=4), [], []
    assert np.isnan(rank.corr) and rank.trust == 1.0
    assert not rank.observe(np.linspace(0, 1, 8), np.ones(8))  # one outcome: no ranking to check
    assert not rank.observe(np.full(8, 0.4), np.r_[np.ones(4), np.zeros(4)])  # one score: likewise
    for k in range(20):
        o = (rng.random(8) < 0.5).astype(float)
        s = np.clip(0.3 + 0.2 * o + rng.normal(0, 0.2, 8), 0, 1)
        if rank.observe(s, o):
            zs.append((s - s.mean()) / s.std())
            zo.append((o - o.mean()) / o.std())
        if rank.n_obs < 4:
            assert rank.trust == 1.0  # too few groups to act on
    # benchmarks/imagination_fidelity.py's advantage correlation over the same groups
    assert rank.corr == pytest.approx(np.corrcoef(np.concatenate(zs), np.concatenate(zo))[0, 1])
    assert rank.trust == pytest.approx(np.clip(rank.corr / 0.3, 0, 1))
    again = ImaginationRanking(floor=0.3, half_life=1e9)
    again.load_state_dict(json.loads(json.dumps(rank.state_dict())))
    assert again.corr == rank.corr and again.trust == rank.trust
    with pytest.raises(ValueError, match="rank_floor"):
        CorrectionConfig(rank_floor=0.0)
    with pytest.raises(ValueError, match="matching"):
        rank.observe(np.ones(8), np.ones(7))


def _ranking_run(rank_signal, rank_floor=0.3, groups=40, seed=0):
    """A run of steps like the trainer's: 1 anchor group of 8 and 7 imagined ones. The imagination check's rollouts
    have true (replayed) outcomes at the real success rate q of their start state, and imagined scores
    ``rank_signal`` x outcome + noise whose mean *under-promises* (round s44's world model: the gap check trusts
    it). Returns the corrector and the imagined stream's share of |weight x advantage| per step."""
    rng = np.random.default_rng(seed)
    corr = RewardCorrector(CorrectionConfig(gap_tolerance=0.15, gap_half_life=2.0, gap_z=1.0, min_pairs=10**6,
                                            rank_floor=rank_floor))
    shares = []
    for _ in range(groups):
        q = rng.uniform(0.3, 0.7)
        real = np.full((8, 8), np.nan)
        real[0] = rng.random(8) < q
        outcome = np.full((8, 8), np.nan)
        outcome[0] = rng.random(8) < q
        check = np.full((8, 8), np.nan)
        check[0] = np.clip(0.1 + rank_signal * outcome[0] + rng.normal(0, 0.1, 8), 0, 1)
        out = corr.process(rng.uniform(0, 0.3, (8, 8)), real, np.eye(8, dtype=bool)[0], anchor_imagined=check,
                           anchor_imagined_outcome=outcome)
        push = np.abs(out.weights * out.advantages)
        shares.append(push[1:].sum() / max(push.sum(), 1e-12))
    return corr, np.array(shares)


def test_ranking_check_turns_down_imagination_that_ranks_at_random_and_keeps_one_that_ranks():
    # a world model whose imagined scores say nothing about which rollout of a group succeeds, and under-promise
    noise, shares = _ranking_run(rank_signal=0.0)
    stats = noise.stats()
    assert stats["imagination_gap"] < 0  # the one-sided gap check would trust it on every step ...
    assert abs(stats["imagination_rank_corr"]) < 0.3 and stats["n_rank_obs"] >= 10
    assert np.mean(shares[-20:]) < 0.5  # ... the ranking check turns its imagined groups down
    good, good_shares = _ranking_run(rank_signal=0.3)
    assert good.stats()["imagination_rank_corr"] > 0.5 and good.stats()["imagination_trust"] == 1.0
    assert np.mean(good_shares[-20:]) > 0.8  # 7 of 8 groups, at full weight
    # off (rank_floor=None): measured and logged, never acted on
    off, off_shares = _ranking_run(rank_signal=0.0, rank_floor=None)
    assert off.stats()["imagination_rank_corr"] == pytest.approx(stats["imagination_rank_corr"])
    assert off.stats()["imagination_trust"] == 1.0 and np.mean(off_shares[-20:]) > 0.8
    with pytest.raises(ValueError, match="needs anchor_imagined"):
        off.process(np.zeros((2, 8)), np.zeros((2, 8)), np.array([True, False]),
                    anchor_imagined_outcome=np.zeros((2, 8)))
    with pytest.raises(ValueError, match="one outcome per anchor_imagined rollout"):
        off.process(np.zeros((2, 8)), np.zeros((2, 8)), np.array([True, False]), anchor_imagined=np.zeros((2, 8)),
                    anchor_imagined_outcome=np.zeros((2, 7)))


def test_rank_matched_pairs_hand_values():
    p, r = rank_matched_pairs(np.array([0.9, 0.1, 0.5, 0.3]), np.array([1.0, 0.0, 0.0, 1.0]))
    np.testing.assert_array_equal(p, [0.1, 0.3, 0.5, 0.9])
    np.testing.assert_array_equal(r, [0.0, 0.0, 1.0, 1.0])
    # more imagined rollouts than real outcomes: the order statistics at quantiles 1/6, 3/6, 5/6 (2nd, 4th, 7th of 8)
    p, r = rank_matched_pairs(np.arange(8) / 10.0, np.array([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(p, [0.1, 0.3, 0.6])
    np.testing.assert_array_equal(r, [0.0, 1.0, 1.0])


def _lift_like_step(rng, num_groups=1):
    """A world model that judges real trajectories almost perfectly but over-promises on its own imagined rollouts
    (the finding of benchmarks/calibration_pairs.py on Lift). Per start state, success probability q; returns the
    world-model scores of real rollouts, their outcomes, and imagined rollouts' scores and true outcomes."""
    q = rng.uniform(0.1, 0.7, (num_groups, 1))
    real_o = (rng.uniform(size=(num_groups, 8)) < q).astype(float)
    real_s = np.where(real_o > 0, rng.uniform(0.3, 1.0, real_o.shape), rng.uniform(0.0, 0.05, real_o.shape))
    imag_o = (rng.uniform(size=(num_groups, 8)) < q).astype(float)
    imag_s = np.clip(0.35 + 0.4 * imag_o + rng.normal(0, 0.1, imag_o.shape), 0, 1)
    return real_s, real_o, imag_s, imag_o


def test_matched_pairs_calibrate_imagined_scores_that_replayed_pairs_get_wrong():
    rng = np.random.default_rng(0)
    base = dict(min_pairs=64, refit_every=16, adv_scale="outcome")
    rollout = RewardCorrector(CorrectionConfig(**base))
    matched = RewardCorrector(CorrectionConfig(**base, calibration_pairs="matched"))
    for _ in range(60):  # one anchor group per step, with its imagination check
        real_s, real_o, imag_s, _ = _lift_like_step(rng)
        for corr in (rollout, matched):
            corr.process(real_s, real_o, np.array([True]), anchor_imagined=imag_s)
    assert rollout.stats()["n_pairs"] == matched.stats()["n_pairs"] == 60 * 8
    _, _, imag_s, imag_o = _lift_like_step(rng, 400)
    mse = {name: float(((f(imag_s) - imag_o) ** 2).mean())
           for name, f in (("raw", lambda x: x), ("rollout", rollout.calibrate), ("matched", matched.calibrate))}
    # replayed real pairs send every imagined score above ~0.5 to ~0.9 (worse than raw); matched pairs learn the
    # imagined scores' own success rates
    assert mse["rollout"] > mse["raw"]
    assert mse["matched"] < 0.8 * mse["raw"] and mse["matched"] < 0.7 * mse["rollout"], mse
    # rows without an imagination check give the matched calibrator no pairs
    real_s, real_o, _, _ = _lift_like_step(rng)
    matched.process(real_s, real_o, np.array([True]))
    assert matched.stats()["n_pairs_step"] == 0


def test_calibration_pairs_config_errors():
    with pytest.raises(ValueError, match="unknown calibration_pairs 'x'.*'rollout', 'matched'"):
        CorrectionConfig(calibration_pairs="x")
    with pytest.raises(ValueError, match="calibration_uncertainty"):
        CorrectionConfig(calibration_pairs="matched", calibration_uncertainty=True)

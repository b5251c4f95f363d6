/* See rr_safety.h. Mirrors policies/runtime/safety.py and policies/runtime/passivity.py line by line. */
#include <math.h>

#include "rr_safety.h"

int rr_limit_command(const float *command, const float *previous, const float *low, const float *high,
                     const float *max_delta, int n, float *out) {
    int i;
    for (i = 0; i < n; ++i) {
        if (!isfinite(command[i])) {
            for (i = 0; i < n; ++i) out[i] = previous[i];
            return RR_LIMIT_NONFINITE;
        }
    }
    for (i = 0; i < n; ++i) {
        float v = command[i] < low[i] ? low[i] : (command[i] > high[i] ? high[i] : command[i]);
        if (max_delta[i] >= 0.0f) {
            float lo = previous[i] - max_delta[i], hi = previous[i] + max_delta[i];
            v = v < lo ? lo : (v > hi ? hi : v);
        }
        out[i] = v;
    }
    return RR_LIMIT_OK;
}

int rr_tank_init(rr_tank *t, int n, rr_real t_init, rr_real t_min, rr_real t_max, rr_real margin,
                 const rr_real *damping, int n_damping) {
    int i;
    if (n < 1 || n > RR_TANK_MAX_JOINTS || !(0 < t_min && t_min <= t_init && t_init <= t_max) || !(margin >= 0))
        return -1;
    if (n_damping != 1 && n_damping != n) return -1;
    t->n = n;
    t->tank = t_init;
    t->t_min = t_min;
    t->t_max = t_max;
    t->margin = margin;
    t->power = 0;
    for (i = 0; i < n; ++i) {
        t->damping[i] = damping[n_damping == 1 ? 0 : i];
        if (!(t->damping[i] >= 0)) return -1;
    }
    t->has_prev = 0;
    return 0;
}

int rr_tank_set_power(rr_tank *t, rr_real power) {
    if (!(power >= 0) || !isfinite(power)) return -1;
    t->power = power;
    return 0;
}

/* T <- T - injected + H (H, the harvest and the refill, only while T < T_max); overflow above T_max discarded and
 * reported. */
static void rr_credit(rr_tank *t, rr_real injected, rr_real harvest_rate, rr_real dt, rr_tank_report *r) {
    rr_real harvested = t->tank < t->t_max ? (harvest_rate + t->power) * dt : 0;
    rr_real v = t->tank - injected + harvested;
    rr_real overflow = v - t->t_max > 0 ? v - t->t_max : 0;
    t->tank = overflow > 0 ? t->t_max : v; /* exactly T_max: no round-off just below it */
    r->injected = injected;
    r->harvested = harvested;
    r->overflow = overflow;
    r->tank = t->tank;
}

/* 1 if all n values of every non-null array are finite and dt > 0. */
static int rr_all_finite(int n, rr_real dt, const rr_real *a, const rr_real *b, const rr_real *c, const rr_real *d,
                         const rr_real *e) {
    const rr_real *arrays[5];
    int i, j;
    arrays[0] = a; arrays[1] = b; arrays[2] = c; arrays[3] = d; arrays[4] = e;
    if (!(isfinite(dt) && dt > 0)) return 0;
    for (j = 0; j < 5; ++j) {
        if (arrays[j] == 0) continue;
        for (i = 0; i < n; ++i) if (!isfinite(arrays[j][i])) return 0;
    }
    return 1;
}

int rr_tank_torque(rr_tank *t, const rr_real *tau, const rr_real *q, const rr_real *qdot, rr_real dt,
                   rr_real *command, rr_tank_report *r) {
    int i;
    rr_real e_hat = 0, budget, alpha;
    if (!rr_all_finite(t->n, dt, tau, q, qdot, 0, 0)) return RR_TANK_NONFINITE;
    r->injected = r->harvested = r->overflow = 0;
    r->tank = t->tank;
    if (t->has_prev) {
        rr_real e = 0, rate = 0;
        for (i = 0; i < t->n; ++i) {
            rate += t->qd_prev[i] * (t->damping[i] * t->qd_prev[i]);
            e += t->applied[i] * (q[i] - t->q_prev[i]);
        }
        rr_credit(t, e, rate, dt, r);
    }
    for (i = 0; i < t->n; ++i) e_hat += tau[i] * qdot[i];
    e_hat *= dt;
    budget = t->tank - t->t_min - t->margin;
    if (e_hat <= budget || e_hat <= 0) { /* fits, or predicted to give energy back (or none) */
        alpha = 1;
    } else {
        alpha = budget / e_hat;
        alpha = alpha < 0 ? 0 : (alpha > 1 ? 1 : alpha);
    }
    for (i = 0; i < t->n; ++i) {
        command[i] = alpha * tau[i];
        t->q_prev[i] = q[i];
        t->qd_prev[i] = qdot[i];
        t->applied[i] = command[i];
    }
    t->has_prev = 1;
    r->alpha = alpha;
    return RR_TANK_OK;
}

/* Largest alpha in [0, 1] with a alpha + b alpha^2 <= budget (b >= 0), 0 if there is none. */
static rr_real rr_largest_root(rr_real a, rr_real b, rr_real budget) {
    if (b > 0) {
        rr_real disc = a * a + 4 * b * budget, root;
        if (disc < 0) return 0;
        root = (-a + sqrt(disc)) / (2 * b) * (1 - 1e-12);
        return root < 0 ? 0 : (root > 1 ? 1 : root);
    }
    if (a > 0) {
        rr_real v = budget / a;
        return v < 0 ? 0 : (v > 1 ? 1 : v);
    }
    return a <= budget ? 1 : 0;
}

int rr_tank_setpoint(rr_tank *t, const rr_real *target, const rr_real *previous, const rr_real *q,
                     const rr_real *qdot, const rr_real *stiffness, rr_real dt, rr_real *command,
                     rr_tank_report *r) {
    int i;
    rr_real a = 0, b = 0, rate = 0, budget, alpha;
    if (!rr_all_finite(t->n, dt, target, previous, q, qdot, stiffness)) return RR_TANK_NONFINITE;
    for (i = 0; i < t->n; ++i) {
        rr_real e = previous[i] - q[i], delta = target[i] - previous[i];
        a += e * (stiffness[i] * delta);
        b += delta * (stiffness[i] * delta);
        rate += qdot[i] * (t->damping[i] * qdot[i]);
    }
    b *= 0.5;
    budget = t->tank - t->t_min - t->margin;
    alpha = a + b <= budget ? 1 : rr_largest_root(a, b, budget);
    rr_credit(t, a * alpha + b * alpha * alpha, rate, dt, r);
    for (i = 0; i < t->n; ++i) command[i] = previous[i] + alpha * (target[i] - previous[i]);
    r->alpha = alpha;
    return RR_TANK_OK;
}

/* Action limits and the passivity filter (energy tank) of robot-rl, in C99.
 * Same semantics and parameters as policies.runtime.safety.limit_command and
 * policies.runtime.passivity.EnergyTank (see their docstrings); tests compare both on recorded streams.
 * The tank computes in double (rr_real) so C and Python agree to 1e-6 J over long streams; define
 * RR_REAL_FLOAT to use float on targets without a double-precision FPU. */
#ifndef RR_SAFETY_H
#define RR_SAFETY_H

#ifdef RR_REAL_FLOAT
typedef float rr_real;
#else
typedef double rr_real;
#endif

#ifndef RR_TANK_MAX_JOINTS
#define RR_TANK_MAX_JOINTS 16
#endif

#define RR_LIMIT_OK 0
#define RR_LIMIT_NONFINITE (-4)

/* Clamp to [low, high] and to |command - previous| <= max_delta (per control period); a non-finite command
 * is refused: out = previous, RR_LIMIT_NONFINITE returned. max_delta < 0 means no rate limit. */
int rr_limit_command(const float *command, const float *previous, const float *low, const float *high,
                     const float *max_delta, int n, float *out);

typedef struct {
    int n;
    rr_real tank, t_min, t_max, margin, power;
    rr_real damping[RR_TANK_MAX_JOINTS];
    int has_prev;
    rr_real q_prev[RR_TANK_MAX_JOINTS], qd_prev[RR_TANK_MAX_JOINTS], applied[RR_TANK_MAX_JOINTS];
} rr_tank;

typedef struct {
    rr_real alpha, tank, injected, harvested, overflow;
} rr_tank_report;

/* 0 on success, -1 for invalid parameters (0 < t_min <= t_init <= t_max, margin >= 0, damping >= 0). */
int rr_tank_init(rr_tank *t, int n, rr_real t_init, rr_real t_min, rr_real t_max, rr_real margin,
                 const rr_real *damping, int n_damping);
/* The refill P in W (filter.tank_power_w, RR_TANK_POWER; 0 after rr_tank_init): P dt is credited with the harvest
 * each step. 0 on success, -1 for a negative or non-finite value. */
int rr_tank_set_power(rr_tank *t, rr_real power);
/* Both return RR_TANK_OK, or RR_TANK_NONFINITE for a NaN / inf input or dt <= 0: then the tank is left unchanged
 * and `command` is not written (hold your safe command), as policies.runtime.passivity raises. */
#define RR_TANK_OK 0
#define RR_TANK_NONFINITE (-5)
int rr_tank_torque(rr_tank *t, const rr_real *tau, const rr_real *q, const rr_real *qdot, rr_real dt,
                   rr_real *command, rr_tank_report *report);
int rr_tank_setpoint(rr_tank *t, const rr_real *target, const rr_real *previous, const rr_real *q,
                     const rr_real *qdot, const rr_real *stiffness, rr_real dt, rr_real *command,
                     rr_tank_report *report);

#endif /* RR_SAFETY_H */

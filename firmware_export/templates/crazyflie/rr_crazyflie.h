/* robot-rl policy as a Crazyflie controller: the firmware-independent core (plain floats in, motor forces out).
 * rr_crazyflie_app.c binds it to crazyflie-firmware's out-of-tree controller API; a host program (or a test) can
 * call it directly with a simulated state. Constants of the policy's contract: rr_crazyflie_config.h. */
#ifndef RR_CRAZYFLIE_H
#define RR_CRAZYFLIE_H

#include "rr_policy.h"

/* One drone's controller state (caller-owned: the core keeps no globals). */
typedef struct {
    rr_obs_state obs;                  /* observation histories and the position integral */
    float last_action[RR_ACTION_DIM];  /* the previous command, normalised, as the policy was trained */
    float target[3];                   /* the position target, world frame, m */
    int has_target;                    /* 0 until a position setpoint or the first step (then: hold there) */
    int fault;                         /* latched by a failed step: motors off until rr_cf_reset */
    rr_signals sig;                    /* this step's signals, input and commands: here, not on the caller's */
    float input[RR_OBS_DIM];           /* stack (the firmware's stabilizer task has 1.8 KB for everything) */
    float rpm[RR_ACTION_DIM];
} rr_cf_state;

/* Forget everything: the next step starts a new flight (histories filled with its first sample). */
void rr_cf_reset(rr_cf_state *s);

/* sizeof(rr_cf_state), for bindings from other languages (a simulation stepping many drones). */
unsigned long rr_cf_state_bytes(void);

/* One control step, at RR_CF_RATE_HZ.
 *   pos[3] m, vel[3] m/s: the state estimate, world frame (z up); quat_xyzw[4]: body -> world attitude;
 *   gyro_deg_s[3]: body rates, deg/s (the firmware's sensor units);
 *   setpoint_abs: 1 if sp_pos/sp_vel hold an absolute position setpoint (and its velocity, world frame);
 *     0: hold the last target (the current position at the first step) with zero velocity;
 *   thrust_max_n: the force a normalised motor force of 1 stands for, N (the firmware's THRUST_MAX).
 * Writes forces[4] in [0, 1] (fractions of thrust_max_n, motor order M1..M4). The target's offset is clipped to
 * RR_CF_ENVELOPE_M and its speed to RR_CF_MAX_TARGET_SPEED_M_S: the envelope the policy was trained in.
 * Returns RR_OK, or the RR_ERR_* of a non-finite input or output: the fault latches, forces are 0 from then on. */
int rr_cf_step(rr_cf_state *s, const float pos[3], const float vel[3], const float quat_xyzw[4],
               const float gyro_deg_s[3], int setpoint_abs, const float sp_pos[3], const float sp_vel[3],
               float thrust_max_n, float forces[RR_ACTION_DIM]);

#endif /* RR_CRAZYFLIE_H */

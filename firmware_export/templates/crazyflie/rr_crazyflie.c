/* robot-rl policy as a Crazyflie controller: the core (see rr_crazyflie.h). */
#include <math.h>
#include <string.h>

#include "rr_crazyflie.h"
#include "rr_crazyflie_config.h"

void rr_cf_reset(rr_cf_state *s) {
    int i;
    rr_obs_reset(&s->obs);
    for (i = 0; i < RR_ACTION_DIM; ++i) s->last_action[i] = 0.0f; /* hover: the contract's start */
    s->target[0] = s->target[1] = s->target[2] = 0.0f;
    s->has_target = 0;
    s->fault = 0;
}

unsigned long rr_cf_state_bytes(void) { return (unsigned long)sizeof(rr_cf_state); }

/* Per-rotor thrust of a rotor-speed command, N: the contract's thrust model. */
static float rr_cf_thrust(float rpm) {
    float u = rpm / RR_CF_MAX_RPM;
    u = u < 0.0f ? 0.0f : (u > 1.0f ? 1.0f : u);
    return RR_CF_MAX_THRUST_N * ((1.0f - RR_CF_THRUST_CURVE_LINEAR) * u * u + RR_CF_THRUST_CURVE_LINEAR * u);
}

static void rr_cf_off(float forces[RR_ACTION_DIM]) {
    int i;
    for (i = 0; i < RR_ACTION_DIM; ++i) forces[i] = 0.0f;
}

int rr_cf_step(rr_cf_state *s, const float pos[3], const float vel[3], const float quat_xyzw[4],
               const float gyro_deg_s[3], int setpoint_abs, const float sp_pos[3], const float sp_vel[3],
               float thrust_max_n, float forces[RR_ACTION_DIM]) {
    rr_signals *sig = &s->sig;
    float tvel[3], norm, speed;
    float x, y, z, w;
    int i, rc;
    if (s->fault || !(thrust_max_n > 0.0f)) {
        rr_cf_off(forces);
        return RR_ERR_NONFINITE_INPUT;
    }
    tvel[0] = tvel[1] = tvel[2] = 0.0f;
    if (setpoint_abs) {
        for (i = 0; i < 3; ++i) {
            if (!isfinite(sp_pos[i]) || !isfinite(sp_vel[i])) {
                s->fault = 1;
                rr_cf_off(forces);
                return RR_ERR_NONFINITE_INPUT;
            }
            s->target[i] = sp_pos[i];
            tvel[i] = sp_vel[i];
        }
        s->has_target = 1;
    } else if (!s->has_target) {
        for (i = 0; i < 3; ++i) s->target[i] = pos[i]; /* no setpoint yet: hold here */
        s->has_target = 1;
    }
    speed = sqrtf(tvel[0] * tvel[0] + tvel[1] * tvel[1] + tvel[2] * tvel[2]);
    if (speed > RR_CF_MAX_TARGET_SPEED_M_S) {
        for (i = 0; i < 3; ++i) tvel[i] *= RR_CF_MAX_TARGET_SPEED_M_S / speed;
    }
    for (i = 0; i < 3; ++i) sig->pos_w[i] = pos[i] - s->target[i];
    norm = sqrtf(sig->pos_w[0] * sig->pos_w[0] + sig->pos_w[1] * sig->pos_w[1] + sig->pos_w[2] * sig->pos_w[2]);
    if (norm > RR_CF_ENVELOPE_M) {
        for (i = 0; i < 3; ++i) sig->pos_w[i] *= RR_CF_ENVELOPE_M / norm; /* fly towards it at the trained limit */
    }
    x = quat_xyzw[0], y = quat_xyzw[1], z = quat_xyzw[2], w = quat_xyzw[3];
    sig->rot_mat[0] = 1.0f - 2.0f * (y * y + z * z);
    sig->rot_mat[1] = 2.0f * (x * y - w * z);
    sig->rot_mat[2] = 2.0f * (x * z + w * y);
    sig->rot_mat[3] = 2.0f * (x * y + w * z);
    sig->rot_mat[4] = 1.0f - 2.0f * (x * x + z * z);
    sig->rot_mat[5] = 2.0f * (y * z - w * x);
    sig->rot_mat[6] = 2.0f * (x * z - w * y);
    sig->rot_mat[7] = 2.0f * (y * z + w * x);
    sig->rot_mat[8] = 1.0f - 2.0f * (x * x + y * y);
    for (i = 0; i < 3; ++i) {
        sig->lin_vel_w[i] = vel[i] - tvel[i];
        sig->ang_vel_b[i] = gyro_deg_s[i] * 0.017453292519943295f;
    }
    memcpy(sig->last_action, s->last_action, sizeof(sig->last_action));
    rc = rr_obs_build(&s->obs, sig, s->input);
    if (rc == RR_OK) rc = rr_policy_step(s->input, s->rpm);
    if (rc != RR_OK) {
        s->fault = 1;
        rr_cf_off(forces);
        return rc;
    }
    rr_normalized_action(s->rpm, s->last_action);
    for (i = 0; i < RR_ACTION_DIM; ++i) {
        float f = rr_cf_thrust(s->rpm[i]) / thrust_max_n;
        forces[i] = f < 0.0f ? 0.0f : (f > 1.0f ? 1.0f : f);
    }
    return RR_OK;
}

/* robot-rl policy as crazyflie-firmware's out-of-tree controller (CONFIG_CONTROLLER_OOT; select it with the
 * parameter stabilizer.controller = 6, ControllerTypeOot). The stabilizer calls controllerOutOfTree at 1 kHz with
 * the state estimate and the commander's setpoint; the policy steps at RR_CF_RATE_HZ (the rate it was trained at)
 * and its four rotor forces, normalised by the platform's THRUST_MAX, go through the firmware's own power
 * distribution (controlModeForce: motor order M1..M4, battery-compensated thrust -> PWM). */
#include <stdbool.h>
#include <stdint.h>

#include "FreeRTOS.h"
#include "app.h"
#include "controller.h"
#include "platform_defaults.h"
#include "stabilizer_types.h"
#include "task.h"

#define DEBUG_MODULE "ROBOTRL"
#include "debug.h"

#include "rr_crazyflie.h"
#include "rr_crazyflie_config.h"

static rr_cf_state rr_state;

void appMain(void) {
    DEBUG_PRINT("robot-rl policy controller ready (stabilizer.controller = 6)\n");
    while (1) {
        vTaskDelay(M2T(2000));
    }
}

void controllerOutOfTreeInit(void) { rr_cf_reset(&rr_state); }

bool controllerOutOfTreeTest(void) { return true; }

void controllerOutOfTree(control_t *control, const setpoint_t *setpoint, const sensorData_t *sensors,
                         const state_t *state, const uint32_t tick) {
    float pos[3], vel[3], quat[4], gyro[3], sp_pos[3], sp_vel[3], forces[RR_ACTION_DIM];
    int i, absolute;
    control->controlMode = controlModeForce;
    if (setpoint->mode.z == modeDisable) { /* the commander's stop (and its timeout): motors off, next flight fresh */
        rr_cf_reset(&rr_state);
        for (i = 0; i < STABILIZER_NR_OF_MOTORS; ++i) control->normalizedForces[i] = 0.0f;
        return;
    }
    if (!RATE_DO_EXECUTE(RR_CF_RATE_HZ, tick)) return; /* the forces of the last step stay in control */
    pos[0] = state->position.x, pos[1] = state->position.y, pos[2] = state->position.z;
    vel[0] = state->velocity.x, vel[1] = state->velocity.y, vel[2] = state->velocity.z;
    quat[0] = state->attitudeQuaternion.x, quat[1] = state->attitudeQuaternion.y;
    quat[2] = state->attitudeQuaternion.z, quat[3] = state->attitudeQuaternion.w;
    gyro[0] = sensors->gyro.x, gyro[1] = sensors->gyro.y, gyro[2] = sensors->gyro.z;
    absolute = setpoint->mode.x == modeAbs && setpoint->mode.y == modeAbs && setpoint->mode.z == modeAbs;
    sp_pos[0] = setpoint->position.x, sp_pos[1] = setpoint->position.y, sp_pos[2] = setpoint->position.z;
    sp_vel[0] = sp_vel[1] = sp_vel[2] = 0.0f;
    if (!setpoint->velocity_body) { /* a world-frame velocity feeds forward; a body-frame one is not an input */
        sp_vel[0] = setpoint->velocity.x, sp_vel[1] = setpoint->velocity.y, sp_vel[2] = setpoint->velocity.z;
    }
    rr_cf_step(&rr_state, pos, vel, quat, gyro, absolute, sp_pos, sp_vel, THRUST_MAX, forces);
    for (i = 0; i < STABILIZER_NR_OF_MOTORS; ++i) control->normalizedForces[i] = forces[i];
}

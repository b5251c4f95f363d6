/* Example: the policy in a control task at its contract's rate (replace the two robot_* functions with your drivers).
 * Per period: read sensors -> rr_obs_build -> rr_policy_step -> rr_limit_command -> motors. Any error holds the
 * previous (safe) command. */
#include "rr_policy.h"
#include "rr_safety.h"

void robot_read_signals(rr_signals *sig);     /* your sensor fusion, SI units, world/body frames of the contract */
void robot_write_command(const float *command); /* your motor driver, units of the contract's action kind */

void rr_control_task(void); /* call every RR_OBS_DT seconds from a timer (default: the contract's period) */

void rr_control_task(void) {
    static rr_obs_state state = {0};
    static float previous[RR_ACTION_DIM];
    static int started = 0;
    rr_signals sig;
    float obs[RR_OBS_DIM], command[RR_ACTION_DIM], applied[RR_ACTION_DIM], max_delta[RR_ACTION_DIM];
    int i;
    if (!started) {
        rr_obs_reset(&state);
        for (i = 0; i < RR_ACTION_DIM; ++i) previous[i] = rr_action_offset[i];
        started = 1;
    }
    robot_read_signals(&sig);
#ifdef RR_HAS_LAST_ACTION
    rr_normalized_action(previous, sig.last_action);
#endif
    for (i = 0; i < RR_ACTION_DIM; ++i) max_delta[i] = -1.0f; /* set a rate limit (units per period) here */
    if (rr_obs_build(&state, &sig, obs) != RR_OK || rr_policy_step(obs, command) != RR_OK) {
        robot_write_command(previous);
        return;
    }
    rr_limit_command(command, previous, rr_action_low, rr_action_high, max_delta, RR_ACTION_DIM, applied);
    for (i = 0; i < RR_ACTION_DIM; ++i) previous[i] = applied[i];
    robot_write_command(applied);
}

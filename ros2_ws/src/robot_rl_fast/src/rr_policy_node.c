/* rr_policy_node: an exported multirotor policy as a native ROS 2 node (rcl + the generated C of firmware_export).
 *
 * The fast path of robot_rl_ros's policy_node for control rates a Python executor cannot keep (1 kHz): no
 * interpreter, no executor, no heap after start-up. One thread waits on the odometry and e-stop subscriptions and
 * steps the policy on each odometry message, at most once per control period (faster odometry is decimated on a grid
 * of the period), so a command answers the newest measurement.
 *
 *   nav_msgs/Odometry on `odom` (world pose, body twist, REP 105; sensor-data QoS)
 *     -> signals: position minus target (world), body-to-world rotation matrix, world velocity, body rates
 *     -> rr_obs_build -> rr_policy_step -> rr_limit_command (contract limits, optional rate limit)
 *     -> std_msgs/Float64MultiArray on `command` (rotor speeds, the contract's unit and motor order)
 *
 * Safety, as policy_node's safety layer: an odometry message is rejected and counted (the node keeps running, the
 * message never feeds the watchdog) when a value is not finite *as the float the policy uses* (1e39 is finite in the
 * message's double, infinite in float), its quaternion is not of unit norm (|n - 1| > 0.01), a scaled signal would
 * not be finite (rr_obs_check), its stamp is older or further in the future than --max-age, or its twist is not in a
 * body frame (child_frame_id empty or equal to header.frame_id, REP 105; or not --child-frame when given). A non-finite
 * command is never published; odometry older than --watchdog seconds, or an e-stop (std_msgs/Bool true on `estop`,
 * reliable + transient-local) latches a fault and the safe command (motors stop: zeros) goes out every period until
 * the node is restarted. The first accepted odometry message arms the watchdog.
 *
 * Usage: rr_policy_node [--watchdog S] [--max-rate UNITS_PER_S] [--target X,Y,Z] [--max-age S] [--frame ID]
 *                       [--child-frame ID] [--reliable] [--cpu N] [--rt-priority P] [--duration S] [--stats FILE]
 *                       [--ros-args ...]
 *   --target X,Y,Z: the hover point in the odometry frame, m (default: the contract's target_position_m).
 *   --max-age S: refuse odometry stamped more than S seconds from this machine's clock (default 0.25; 0: off).
 *   --reliable: publish commands reliably (for drivers subscribing with ROS 2's default QoS; default best effort).
 *   --cpu N, --rt-priority P: pin the process to CPU N and run it SCHED_FIFO at priority P with its memory locked,
 *   set before rcl starts (DDS threads inherit them); where the system refuses, the node says so and runs on.
 *   --stats FILE writes, at exit, counts and the latency from each odometry message's header stamp (wall clock) to
 *   the publication of its command (p50 / p99 / max), and the control periods, as YAML.
 *
 * Stopping (SIGINT or SIGTERM, or the end of --duration) is bounded: the loop ends within one period, --stats is
 * written, then rcl and DDS are released. Should that release (or anything after the signal) take longer than
 * SHUTDOWN_GRACE_S, the node says so and exits without it (status 0 once the statistics are written, 1 before); a
 * second signal exits at once. A node told to stop never stays up waiting on its middleware.
 *
 * Built by `robot-rl export ros2-node` (robot_rl_ros/fast_node.py) or by CMakeLists.txt with colcon; the policy
 * (rr_policy.c/.h, rr_safety.c/.h) comes from `robot-rl export firmware --target host`, compiled with
 * -DRR_OBS_DT=<period> when the node runs at another rate than the contract's.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <nav_msgs/msg/odometry.h>
#include <rcl/rcl.h>
#include <rmw/qos_profiles.h>
#include <rosidl_runtime_c/primitives_sequence_functions.h>
#include <std_msgs/msg/bool.h>
#include <std_msgs/msg/float64_multi_array.h>

#include "rr_policy.h"
#include "rr_safety.h"

#ifndef RR_TARGET
#define RR_TARGET {0.0, 0.0, 0.0}
#endif
#define MAX_SAMPLES (1 << 21) /* latency and period samples kept for --stats (35 min at 1 kHz) */
#define QUAT_NORM_TOLERANCE 0.01 /* as robot_rl_ros.messages.QUAT_NORM_TOLERANCE */

#define SHUTDOWN_GRACE_S 5 /* s from the stop request to the exit, whatever rcl and DDS are doing */
#define TEXT(x) #x
#define NUMBER_TEXT(x) TEXT(x)

static volatile sig_atomic_t g_stop = 0;
static volatile sig_atomic_t g_stats_done = 0; /* the loop ended and --stats (if asked) is written */
static double g_target[3] = RR_TARGET; /* the hover point, odometry frame, m: the contract's, or --target x,y,z */
static void done(rcl_ret_t rc) { (void)rc; } /* shutting down: a failure to release changes nothing */

/* Only async-signal-safe calls below (write, alarm, _exit). */
static void exit_now(const char *why, size_t n) {
    (void)!write(STDERR_FILENO, why, n);
    _exit(g_stats_done ? 0 : 1);
}

static void on_alarm(int sig) {
    static const char why[] =
        "rr_policy_node: still shutting down after " NUMBER_TEXT(SHUTDOWN_GRACE_S) " s: exiting without rcl/DDS release\n";
    (void)sig;
    exit_now(why, sizeof why - 1);
}

static void on_signal(int sig) {
    static const char why[] = "rr_policy_node: second stop request: exiting now\n";
    (void)sig;
    if (g_stop) exit_now(why, sizeof why - 1);
    g_stop = 1;
    alarm(SHUTDOWN_GRACE_S);
}

static int64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* p-th percentile (nearest rank) of n sorted samples, in ms. */
static double pct_ms(const int64_t *sorted, size_t n, double p) {
    size_t k;
    if (n == 0) return 0.0;
    k = (size_t)ceil(p / 100.0 * (double)n);
    k = k < 1 ? 1 : (k > n ? n : k);
    return (double)sorted[k - 1] * 1e-6;
}

static void write_samples(FILE *f, const char *name, int64_t *v, size_t n) {
    qsort(v, n, sizeof(int64_t), cmp_i64);
    fprintf(f, "%s_ms: {n: %zu, p50: %.4f, p99: %.4f, max: %.4f}\n", name, n, pct_ms(v, n, 50.0), pct_ms(v, n, 99.0),
            n ? (double)v[n - 1] * 1e-6 : 0.0);
}

static int finite_float(double v, float *out) {
    float f = (float)v;
    *out = f;
    return isfinite(f);
}

static int same_text(const rosidl_runtime_c__String *a, const char *b) {
    return a->data != NULL && strcmp(a->data, b) == 0;
}

/* The odometry's header against --max-age, --frame and --child-frame (see the file comment). 0, or -1 refused. */
static int odometry_header_ok(const nav_msgs__msg__Odometry *m, double max_age_s, const char *frame,
                              const char *child) {
    const rosidl_runtime_c__String *c = &m->child_frame_id, *p = &m->header.frame_id;
    if (c->size == 0 || (p->data != NULL && c->data != NULL && strcmp(c->data, p->data) == 0)) return -1;
    if (frame != NULL && !same_text(p, frame)) return -1;
    if (child != NULL && !same_text(c, child)) return -1;
    if (max_age_s > 0.0) {
        int64_t stamp = (int64_t)m->header.stamp.sec * 1000000000LL + m->header.stamp.nanosec;
        double age = (double)(now_ns(CLOCK_REALTIME) - stamp) * 1e-9;
        if (stamp == 0 || age > max_age_s || age < -max_age_s) return -1;
    }
    return 0;
}

/* Odometry -> the contract's signals, checked as floats (see the file comment): 0, or -1 with `s` untouched. */
static int odometry_signals(const nav_msgs__msg__Odometry *m, rr_signals *s) {
    const double *target = g_target;
    const double p[3] = {m->pose.pose.position.x, m->pose.pose.position.y, m->pose.pose.position.z};
    double w = m->pose.pose.orientation.w, x = m->pose.pose.orientation.x;
    double y = m->pose.pose.orientation.y, z = m->pose.pose.orientation.z;
    const double v[3] = {m->twist.twist.linear.x, m->twist.twist.linear.y, m->twist.twist.linear.z};
    const double g[3] = {m->twist.twist.angular.x, m->twist.twist.angular.y, m->twist.twist.angular.z};
    double r[9], n;
    float f;
    rr_signals out = *s;
    int i, j;
    for (i = 0; i < 3; ++i)
        if (!finite_float(p[i], &f) || !finite_float(v[i], &f) || !finite_float(g[i], &f)) return -1;
    n = sqrt(w * w + x * x + y * y + z * z);
    if (!isfinite(n) || fabs(n - 1.0) > QUAT_NORM_TOLERANCE) return -1;
    w /= n, x /= n, y /= n, z /= n;
    r[0] = 1 - 2 * (y * y + z * z), r[1] = 2 * (x * y - w * z), r[2] = 2 * (x * z + w * y);
    r[3] = 2 * (x * y + w * z), r[4] = 1 - 2 * (x * x + z * z), r[5] = 2 * (y * z - w * x);
    r[6] = 2 * (x * z - w * y), r[7] = 2 * (y * z + w * x), r[8] = 1 - 2 * (x * x + y * y);
    for (i = 0; i < 3; ++i) {
        double vw = 0.0;
        for (j = 0; j < 3; ++j) vw += r[3 * i + j] * v[j]; /* body twist -> world velocity */
        if (!finite_float(p[i] - target[i], &out.pos_w[i]) || !finite_float(vw, &out.lin_vel_w[i])) return -1;
        out.ang_vel_b[i] = (float)g[i];
    }
    for (i = 0; i < 9; ++i) out.rot_mat[i] = (float)r[i];
    if (rr_obs_check(&out) != RR_OK) return -1; /* a scaled signal would overflow: the policy could not use it */
    *s = out;
    return 0;
}

/* --cpu and --rt-priority, before rcl starts (its threads inherit them). Refusals are reported, not fatal. */
static void realtime(int cpu, int priority) {
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            fprintf(stderr, "rr_policy_node: --cpu %d refused (%s); running unpinned\n", cpu, strerror(errno));
    }
    if (priority > 0) {
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        sp.sched_priority = priority;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
            fprintf(stderr, "rr_policy_node: --rt-priority %d refused (%s; needs CAP_SYS_NICE or an rtprio limit); "
                            "running at normal priority\n", priority, strerror(errno));
        if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
            fprintf(stderr, "rr_policy_node: memory not locked (%s)\n", strerror(errno));
    }
}

static int arg_flag(int argc, char **argv, const char *name) {
    int i;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--ros-args") == 0) break;
        if (strcmp(argv[i], name) == 0) return 1;
    }
    return 0;
}

static const char *arg_value(int argc, char **argv, const char *name) {
    int i;
    for (i = 1; i < argc - 1; ++i) {
        if (strcmp(argv[i], "--ros-args") == 0) break;
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    }
    return NULL;
}

static double arg_number(int argc, char **argv, const char *name, double fallback) {
    const char *text = arg_value(argc, argv, name);
    char *end = NULL;
    double v;
    if (text == NULL) return fallback;
    v = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(v)) {
        fprintf(stderr, "rr_policy_node: %s must be a number, got '%s'\n", name, text);
        exit(2);
    }
    return v;
}

/* --target x,y,z: three finite numbers, else exit 2 naming the flag. */
static void parse_target(const char *text) {
    const char *p = text;
    char *end = NULL;
    int i;
    for (i = 0; i < 3; ++i) {
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || (i < 2 && *end != ',') || (i == 2 && *end != '\0')) {
            fprintf(stderr, "rr_policy_node: --target must be x,y,z in m, got '%s'\n", text);
            exit(2);
        }
        g_target[i] = v;
        p = end + 1;
    }
}

#define CHECK(call, what)                                                                     \
    do {                                                                                      \
        if ((call) != RCL_RET_OK) {                                                           \
            fprintf(stderr, "rr_policy_node: %s failed: %s\n", what, rcutils_get_error_string().str); \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv) {
    const double watchdog_s = arg_number(argc, argv, "--watchdog", 0.1);
    const double max_rate = arg_number(argc, argv, "--max-rate", -1.0);
    const double duration_s = arg_number(argc, argv, "--duration", 0.0);
    const double max_age_s = arg_number(argc, argv, "--max-age", 0.25);
    const double cpu = arg_number(argc, argv, "--cpu", -1.0);
    const double rt_priority = arg_number(argc, argv, "--rt-priority", 0.0);
    const char *frame = arg_value(argc, argv, "--frame");
    const char *target_text = arg_value(argc, argv, "--target");
    const char *child = arg_value(argc, argv, "--child-frame");
    const int reliable = arg_flag(argc, argv, "--reliable");
    const char *stats_path = arg_value(argc, argv, "--stats");
    const int64_t period_ns = (int64_t)llround((double)RR_OBS_DT * 1e9);
    rcl_context_t context = rcl_get_zero_initialized_context();
    rcl_init_options_t init_options = rcl_get_zero_initialized_init_options();
    rcl_allocator_t allocator = rcl_get_default_allocator();
    rcl_node_t node = rcl_get_zero_initialized_node();
    rcl_node_options_t node_options = rcl_node_get_default_options();
    rcl_subscription_t odom_sub = rcl_get_zero_initialized_subscription();
    rcl_subscription_t estop_sub = rcl_get_zero_initialized_subscription();
    rcl_subscription_options_t odom_options = rcl_subscription_get_default_options();
    rcl_subscription_options_t estop_options = rcl_subscription_get_default_options();
    rcl_publisher_t pub = rcl_get_zero_initialized_publisher();
    rcl_publisher_options_t pub_options = rcl_publisher_get_default_options();
    rcl_wait_set_t wait_set = rcl_get_zero_initialized_wait_set();
    nav_msgs__msg__Odometry odom;
    std_msgs__msg__Bool estop;
    std_msgs__msg__Float64MultiArray out;
    rr_obs_state state;
    rr_signals sig;
    float obs[RR_OBS_DIM], command[RR_ACTION_DIM], applied[RR_ACTION_DIM], previous[RR_ACTION_DIM];
    float max_delta[RR_ACTION_DIM];
    int64_t *latency = calloc(MAX_SAMPLES, sizeof(int64_t)), *periods = calloc(MAX_SAMPLES, sizeof(int64_t));
    size_t n_latency = 0, n_periods = 0;
    long received = 0, published = 0, rejected = 0, steps = 0;
    int64_t last_odom = -1, last_step = -1, due = 0, start, stamp_ns = 0, end_ns, first_stamp = 0;
    long missing = 0; /* odometry the stamps say was sent (at the control period) but never arrived */
    int have_due = 0;
    const char *fault = "";
    int i;

    if (latency == NULL || periods == NULL || watchdog_s <= 0.0 || period_ns <= 0) {
        fprintf(stderr, "rr_policy_node: --watchdog must be > 0 (and memory for the statistics available)\n");
        return 2;
    }
    if (cpu != floor(cpu) || cpu < -1.0 || cpu > 1023.0 || rt_priority != floor(rt_priority) || rt_priority < 0.0 ||
        rt_priority > 99.0) {
        fprintf(stderr, "rr_policy_node: --cpu must be a CPU number and --rt-priority an integer in [1, 99]\n");
        return 2;
    }
    if (target_text != NULL) parse_target(target_text);
    memset(&sig, 0, sizeof sig);
    memset(latency, 0, MAX_SAMPLES * sizeof(int64_t)); /* touch the buffers now: no page faults in the loop */
    memset(periods, 0, MAX_SAMPLES * sizeof(int64_t));
    realtime((int)cpu, (int)rt_priority);
    signal(SIGALRM, on_alarm);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    CHECK(rcl_init_options_init(&init_options, allocator), "rcl_init_options_init");
    CHECK(rcl_init(argc, (const char *const *)argv, &init_options, &context), "rcl_init");
    CHECK(rcl_node_init(&node, "rr_policy_node", "", &context, &node_options), "rcl_node_init");
    odom_options.qos = rmw_qos_profile_sensor_data;
    pub_options.qos = rmw_qos_profile_sensor_data;
    if (reliable) pub_options.qos.reliability = RMW_QOS_POLICY_RELIABILITY_RELIABLE;
    estop_options.qos = rmw_qos_profile_default;
    estop_options.qos.depth = 1;
    estop_options.qos.durability = RMW_QOS_POLICY_DURABILITY_TRANSIENT_LOCAL;
    CHECK(rcl_subscription_init(&odom_sub, &node, ROSIDL_GET_MSG_TYPE_SUPPORT(nav_msgs, msg, Odometry), "odom",
                                &odom_options), "odometry subscription");
    CHECK(rcl_subscription_init(&estop_sub, &node, ROSIDL_GET_MSG_TYPE_SUPPORT(std_msgs, msg, Bool), "estop",
                                &estop_options), "e-stop subscription");
    CHECK(rcl_publisher_init(&pub, &node, ROSIDL_GET_MSG_TYPE_SUPPORT(std_msgs, msg, Float64MultiArray), "command",
                             &pub_options), "command publisher");
    CHECK(rcl_wait_set_init(&wait_set, 2, 0, 0, 0, 0, 0, &context, allocator), "rcl_wait_set_init");
    nav_msgs__msg__Odometry__init(&odom);
    std_msgs__msg__Bool__init(&estop);
    std_msgs__msg__Float64MultiArray__init(&out);
    if (!rosidl_runtime_c__double__Sequence__init(&out.data, RR_ACTION_DIM)) return 1;
    rr_obs_reset(&state);
    for (i = 0; i < RR_ACTION_DIM; ++i) {
        previous[i] = rr_action_offset[i];
        max_delta[i] = max_rate >= 0.0 ? (float)(max_rate * RR_OBS_DT) : -1.0f;
    }
#ifdef RR_HAS_LAST_ACTION
    rr_normalized_action(previous, sig.last_action); /* rr_obs_check reads every signal, this one too */
#endif
    fprintf(stderr, "rr_policy_node: %d inputs, %d commands, period %.6f s, watchdog %.3f s, target [%g, %g, %g] m\n",
            RR_OBS_DIM, RR_ACTION_DIM, (double)RR_OBS_DT, watchdog_s, g_target[0], g_target[1], g_target[2]);
    start = now_ns(CLOCK_MONOTONIC);
    end_ns = duration_s > 0.0 ? start + (int64_t)(duration_s * 1e9) : INT64_MAX;

    while (!g_stop && rcl_context_is_valid(&context) && now_ns(CLOCK_MONOTONIC) < end_ns) {
        int64_t now, timeout = period_ns;
        int step = 0;
        rmw_message_info_t info;
        CHECK(rcl_wait_set_clear(&wait_set), "rcl_wait_set_clear");
        CHECK(rcl_wait_set_add_subscription(&wait_set, &odom_sub, NULL), "wait set (odometry)");
        CHECK(rcl_wait_set_add_subscription(&wait_set, &estop_sub, NULL), "wait set (e-stop)");
        if (last_odom >= 0 && *fault == '\0') {
            int64_t left = last_odom + (int64_t)(watchdog_s * 1e9) - now_ns(CLOCK_MONOTONIC);
            timeout = left < timeout ? (left > 0 ? left : 0) : timeout;
        }
        {
            rcl_ret_t rc = rcl_wait(&wait_set, timeout);
            if (rc != RCL_RET_OK && rc != RCL_RET_TIMEOUT) break; /* shutting down */
        }
        if (wait_set.subscriptions[1] && rcl_take(&estop_sub, &estop, &info, NULL) == RCL_RET_OK && estop.data &&
            strcmp(fault, "estop") != 0) {
            fault = "estop";
            fprintf(stderr, "rr_policy_node: e-stop: motors stop, latched until restart\n");
        }
        now = now_ns(CLOCK_MONOTONIC);
        if (wait_set.subscriptions[0]) {
            while (rcl_take(&odom_sub, &odom, &info, NULL) == RCL_RET_OK) { /* drain: the newest counts */
                ++received;
                if (odometry_header_ok(&odom, max_age_s, frame, child) != 0 || odometry_signals(&odom, &sig) != 0) {
                    ++rejected; /* never feeds the watchdog */
                    if (rejected < 10 || rejected % 1000 == 0)
                        fprintf(stderr, "rr_policy_node: odometry rejected (stamp, frame, a value not finite as float "
                                        "or no unit quaternion), %ld so far\n", rejected);
                    continue;
                }
                last_odom = now;
                {
                    int64_t stamp = (int64_t)odom.header.stamp.sec * 1000000000LL + odom.header.stamp.nanosec;
                    int64_t gap = stamp_ns ? (stamp - stamp_ns + period_ns / 2) / period_ns - 1 : 0;
                    missing += gap > 0 ? (long)gap : 0;
                    first_stamp = first_stamp ? first_stamp : stamp;
                    stamp_ns = stamp;
                }
                step = 1;
            }
        }
        if (*fault == '\0' && last_odom >= 0 && now - last_odom > (int64_t)(watchdog_s * 1e9)) {
            fault = "watchdog";
            fprintf(stderr, "rr_policy_node: no odometry for %.3f s: motors stop, latched until restart\n", watchdog_s);
        }
        if (*fault != '\0') { /* the safe command, once per period */
            if (last_step < 0 || now - last_step >= period_ns) {
                for (i = 0; i < RR_ACTION_DIM; ++i) out.data.data[i] = 0.0;
                if (rcl_publish(&pub, &out, NULL) == RCL_RET_OK) ++published;
                last_step = now;
            }
            continue;
        }
        if (!step || (have_due && now < due - period_ns / 2)) continue; /* decimate faster odometry to the period */
        due = have_due ? due + period_ns : now + period_ns;
        if (due < now + period_ns / 2) due = now + period_ns; /* the first step, or the loop fell behind: a new grid */
        have_due = 1;
#ifdef RR_HAS_LAST_ACTION
        rr_normalized_action(previous, sig.last_action);
#endif
        if (rr_obs_build(&state, &sig, obs) != RR_OK || rr_policy_step(obs, command) != RR_OK) {
            ++rejected; /* nothing non-finite goes out: the previous command stands */
            continue;
        }
        rr_limit_command(command, previous, rr_action_low, rr_action_high, max_delta, RR_ACTION_DIM, applied);
        for (i = 0; i < RR_ACTION_DIM; ++i) {
            previous[i] = applied[i];
            out.data.data[i] = (double)applied[i];
        }
        if (rcl_publish(&pub, &out, NULL) == RCL_RET_OK) ++published;
        ++steps;
        if (n_latency < MAX_SAMPLES) latency[n_latency++] = now_ns(CLOCK_REALTIME) - stamp_ns;
        if (last_step >= 0 && n_periods < MAX_SAMPLES) periods[n_periods++] = now - last_step;
        last_step = now;
    }

    if (!g_stop) alarm(SHUTDOWN_GRACE_S); /* --duration ended the loop: the same bound on the release */
    if (stats_path != NULL) {
        FILE *f = fopen(stats_path, "w");
        if (f == NULL) {
            fprintf(stderr, "rr_policy_node: cannot write --stats '%s'\n", stats_path);
        } else {
            fprintf(f, "received: %ld\npublished: %ld\nsteps: %ld\nrejected: %ld\nfault: '%s'\n", received, published,
                    steps, rejected, fault);
            fprintf(f, "missing_between_stamps: %ld\nstamps_s: [%.6f, %.6f]\n", missing, (double)first_stamp * 1e-9,
                    (double)stamp_ns * 1e-9);
            write_samples(f, "latency", latency, n_latency);
            write_samples(f, "period", periods, n_periods);
            fclose(f);
        }
    }
    g_stats_done = 1;
    nav_msgs__msg__Odometry__fini(&odom);
    std_msgs__msg__Bool__fini(&estop);
    std_msgs__msg__Float64MultiArray__fini(&out);
    free(latency);
    free(periods);
    done(rcl_wait_set_fini(&wait_set));
    done(rcl_publisher_fini(&pub, &node));
    done(rcl_subscription_fini(&estop_sub, &node));
    done(rcl_subscription_fini(&odom_sub, &node));
    done(rcl_node_fini(&node));
    done(rcl_shutdown(&context));
    done(rcl_context_fini(&context));
    done(rcl_init_options_fini(&init_options));
    return 0;
}

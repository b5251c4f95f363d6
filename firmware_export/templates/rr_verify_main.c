/* Verification harness (generated code + compiled-in test vectors): prints every command, then the
 * instruction-cost probe on targets that have a SysTick (Cortex-M under QEMU -icount). */
#include <stdio.h>

#include "rr_policy.h"
#include "rr_test_vectors.h"

#ifdef RR_CORTEX_M
#define SYST_CSR (*(volatile unsigned int *)0xE000E010u)
#define SYST_RVR (*(volatile unsigned int *)0xE000E014u)
#define SYST_CVR (*(volatile unsigned int *)0xE000E018u)
static unsigned int ticks(void) { return SYST_CVR; }
static void systick_start(void) {
    SYST_RVR = 0x00FFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u; /* enable, processor clock, no interrupt */
}
/* 3 instructions per iteration: nop, subs, bne. */
static void spin(unsigned int n) {
    __asm volatile("1: nop\n subs %0, %0, #1\n bne 1b" : "+r"(n));
}
#endif

int main(void) {
    int v, i, status = 0;
    float command[RR_ACTION_DIM];
    for (v = 0; v < RR_NUM_VECTORS; ++v) {
        int rc = rr_policy_step(rr_test_obs[v], command);
        if (rc != RR_OK) status = 1;
        printf("V %d %d", v, rc);
        for (i = 0; i < RR_ACTION_DIM; ++i) printf(" %.9g", (double)command[i]);
        printf("\n");
    }
    {
        float bad[RR_OBS_DIM];
        for (i = 0; i < RR_OBS_DIM; ++i) bad[i] = rr_test_obs[0][i];
        bad[RR_OBS_DIM - 1] = bad[RR_OBS_DIM - 1] / 0.0f * 0.0f; /* NaN */
        printf("NAN_INPUT %d\n", rr_policy_step(bad, command));
    }
#ifdef RR_CORTEX_M
    {
        unsigned int t0, t1, t2, t3, reps = 200;
        systick_start();
        spin(1000u); /* let the counter load its reload value */
        t0 = ticks();
        spin(30000u);
        t1 = ticks();
        t2 = ticks();
        for (v = 0; v < (int)reps; ++v) rr_policy_step(rr_test_obs[v % RR_NUM_VECTORS], command);
        t3 = ticks();
        /* SysTick counts down. */
        printf("COST calib_instr=%u calib_ticks=%u step_reps=%u step_ticks=%u\n", 90000u, (t0 - t1) & 0xFFFFFFu, reps,
               (t2 - t3) & 0xFFFFFFu);
    }
#endif
    printf("DONE %d\n", status);
    return status;
}

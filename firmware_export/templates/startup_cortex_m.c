/* Minimal Cortex-M start-up for QEMU (mps2-an386) with semihosting: vector table, .data copy, .bss zero,
 * FPU enable, newlib's monitor handles, then main() and exit() (semihosting SYS_EXIT ends QEMU). */
#include <stdlib.h>

extern unsigned int _sidata, _sdata, _edata, _sbss, _ebss, _estack;
extern int main(void);
extern void initialise_monitor_handles(void);

void Reset_Handler(void);
void Default_Handler(void);

void Default_Handler(void) {
    exit(3);
}

typedef union {
    void (*handler)(void);
    unsigned int *stack_top;
} vector_entry;

__attribute__((section(".isr_vector"), used)) static const vector_entry vectors[16] = {
    {.stack_top = &_estack}, {Reset_Handler}, {Default_Handler}, {Default_Handler}, {Default_Handler},
    {Default_Handler}, {Default_Handler}, {0}, {0}, {0}, {0}, {Default_Handler}, {Default_Handler}, {0},
    {Default_Handler}, {Default_Handler},
};

void Reset_Handler(void) {
    unsigned int *src = &_sidata, *dst = &_sdata;
    while (dst < &_edata) *dst++ = *src++;
    for (dst = &_sbss; dst < &_ebss;) *dst++ = 0u;
    *(volatile unsigned int *)0xE000ED88u |= (0xFu << 20); /* CPACR: full access to CP10, CP11 (the FPU) */
    __asm volatile("dsb\n isb");
    initialise_monitor_handles();
    exit(main());
}

/*
 * cli_hazard_ctor.c - a plugin whose constructor waits for its program's event loop
 * (tests/unit/cli_hazard.c, mode "loop"), the loader lock held meanwhile: dlopen's
 * constructors run under it. For tests/e2e/test_cli_hazards.py.
 */
extern void hazard_wait_loop(void) __attribute__((weak));

__attribute__((constructor)) static void wait_for_the_loop(void)
{
    if (hazard_wait_loop)
        hazard_wait_loop();
}

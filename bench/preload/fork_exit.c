/* fork_exit.c - bench/preload/fork_cost.sh's host: N fork()/exit() cycles one after the other
 * (the child calls exit(0) at once: its atexit handlers and destructors run); prints the
 * wall seconds and the CPU seconds (this process's threads and its reaped children). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double cpu(void)
{
    struct rusage s, c;
    getrusage(RUSAGE_SELF, &s);
    getrusage(RUSAGE_CHILDREN, &c);
    return s.ru_utime.tv_sec + s.ru_stime.tv_sec + c.ru_utime.tv_sec + c.ru_stime.tv_sec +
           (s.ru_utime.tv_usec + s.ru_stime.tv_usec + c.ru_utime.tv_usec + c.ru_stime.tv_usec) / 1e6;
}
int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 500;
    struct timespec a, b;
    usleep(300000); /* the instance starts */
    double c0 = cpu();
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0)
            exit(0);
        waitpid(p, NULL, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.3f %.3f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, cpu() - c0);
    return 0;
}

/* fake_cudart - stands in for libcudart in the profile tests (TROUPE_CUDART
 * points the worker runtime at it): each call prints one line to the
 * worker's log, so a test can see exactly when the profiler would start and
 * stop on a machine without CUDA. */
#include <stdio.h>

int cudaProfilerStart(void);
int cudaProfilerStop(void);

int cudaProfilerStart(void)
{
    printf("fake_cudart: cudaProfilerStart\n");
    fflush(stdout);
    return 0;
}

int cudaProfilerStop(void)
{
    printf("fake_cudart: cudaProfilerStop\n");
    fflush(stdout);
    return 0;
}

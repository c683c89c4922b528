/*
 * timer_leak_driver.c -- drives every entry point of native/timing_wheel.c
 * (create, add, add_at, add_many, cancel, cancel_many, advance with small and
 * large outputs, cascades through many levels, slab growth and reuse,
 * destroy with tasks still pending) so that tests/native/leak_check.py can
 * run it under valgrind and AddressSanitizer/LeakSanitizer.
 *
 * It also checks its own results (every task fires once or is cancelled,
 * sl_wheel_check after each phase) and exits 1 on a mismatch, so a clean
 * memory report of a wrong program cannot pass.
 */
#include "sl_timer.h"

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define EXPECT(cond)                                                            \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                           \
            failures++;                                                         \
        }                                                                       \
    } while (0)

static uint64_t lcg_state = 42;

static uint64_t next_random(void)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lcg_state >> 17;
}

/* Random adds, cancels and advances with a 5-entry output; counts must balance. */
static void random_run(int64_t tick_ms, int32_t wheel_size, int steps)
{
    sl_wheel *w = NULL;
    EXPECT(sl_wheel_create(&w, tick_ms, wheel_size, 17) == 0);
    if (!w)
        return;
    int64_t handles[64] = {0};
    int64_t out_ids[5], out_handles[5];
    int64_t added = 0, cancelled = 0, fired = 0, now = 17;
    for (int step = 0; step < steps; step++) {
        uint64_t r = next_random();
        switch (r % 4) {
        case 0:
        case 1: {
            int64_t delay = (int64_t)(next_random() % (r & 64 ? 100000 : 300)) - 3;
            int64_t h = sl_wheel_add(w, delay, added);
            EXPECT(h > 0);
            handles[next_random() % 64] = h;
            added++;
            break;
        }
        case 2:
            cancelled += sl_wheel_cancel(w, handles[next_random() % 64]);
            break;
        default: {
            now += (int64_t)(next_random() % (r & 128 ? 5000 : 20));
            int64_t n = sl_wheel_advance(w, now, out_ids, (r & 1) ? out_handles : NULL, 5);
            EXPECT(n >= 0 && n <= 5);
            fired += n;
        }
        }
        if (step % 997 == 0)
            EXPECT(sl_wheel_check(w) == 0);
    }
    EXPECT(sl_wheel_check(w) == 0);
    EXPECT(sl_wheel_size(w) == added - cancelled - fired);
    /* Drain half of what is left through next_expiration, destroy the rest pending. */
    int64_t target = sl_wheel_size(w) / 2;
    while (sl_wheel_size(w) > target) {
        int64_t t = sl_wheel_next_expiration(w);
        EXPECT(t >= 0);
        fired += sl_wheel_advance(w, t, out_ids, out_handles, 5);
    }
    EXPECT(sl_wheel_check(w) == 0);
    sl_wheel_destroy(w);
}

/* A large batch: slab growth past the huge-page threshold, cancel half, fire the rest. */
static void bulk_run(void)
{
    enum { N = 300000 };
    int64_t *delays = malloc(N * sizeof(int64_t));
    int64_t *handles = malloc(N * sizeof(int64_t));
    int64_t *half = malloc(N / 2 * sizeof(int64_t));
    int64_t *out = malloc(4096 * sizeof(int64_t));
    char *seen = calloc(N, 1);
    sl_wheel *w = NULL;
    EXPECT(delays && handles && half && out && seen);
    EXPECT(sl_wheel_create(&w, 1, 20, 0) == 0);
    if (delays && handles && half && out && seen && w) {
        for (int64_t i = 0; i < N; i++)
            delays[i] = (int64_t)(next_random() % 30000);
        EXPECT(sl_wheel_add_many(w, delays, NULL, N, handles) == N);
        for (int64_t i = 0; i < N / 2; i++)
            half[i] = handles[2 * i];
        EXPECT(sl_wheel_cancel_many(w, half, N / 2) == N / 2);
        EXPECT(sl_wheel_cancel_many(w, half, N / 2) == 0);
        int64_t fired = 0, n;
        while ((n = sl_wheel_advance(w, 30000, out, NULL, 4096)) > 0) {
            for (int64_t k = 0; k < n; k++) {
                EXPECT(out[k] % 2 == 1 && !seen[out[k]]);
                seen[out[k]] = 1;
            }
            fired += n;
        }
        EXPECT(fired == N / 2 && sl_wheel_size(w) == 0);
        EXPECT(sl_wheel_check(w) == 0);
        /* Reuse the freed slab. */
        EXPECT(sl_wheel_add_many(w, delays, NULL, N / 3, NULL) == N / 3);
        EXPECT(sl_wheel_check(w) == 0);
    }
    sl_wheel_destroy(w); /* with N / 3 tasks pending */
    free(delays);
    free(handles);
    free(half);
    free(out);
    free(seen);
}

/* Many levels (wheel_size 2) up to the clamped maximum deadline. */
static void deep_run(void)
{
    sl_wheel *w = NULL;
    EXPECT(sl_wheel_create(&w, 3, 2, 0) == 0);
    if (!w)
        return;
    int64_t h1 = sl_wheel_add(w, INT64_MAX, 1);
    int64_t h2 = sl_wheel_add_at(w, (int64_t)1 << 40, 2);
    int64_t h3 = sl_wheel_add(w, 12346, 3);
    EXPECT(h1 > 0 && h2 > 0 && h3 > 0);
    EXPECT(sl_wheel_levels(w) > 40);
    EXPECT(sl_wheel_expiration(w, h3) == 12348); /* rounded up to the 3 ms tick */
    EXPECT(sl_wheel_cancel(w, h2) == 1 && sl_wheel_cancel(w, h2) == 0);
    int64_t ids[4];
    int64_t fired = 0;
    for (int guard = 0; guard < 1000 && sl_wheel_size(w) > 0; guard++)
        fired += sl_wheel_advance(w, sl_wheel_next_expiration(w), ids, NULL, 4);
    EXPECT(fired == 2 && sl_wheel_next_expiration(w) == -1);
    EXPECT(sl_wheel_check(w) == 0);
    sl_wheel_destroy(w);
}

static void argument_errors(void)
{
    sl_wheel *w = NULL;
    EXPECT(sl_wheel_create(&w, 0, 20, 0) == SL_TIMER_EINVAL && w == NULL);
    EXPECT(sl_wheel_create(&w, 1, 1, 0) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_create(&w, 1, 20, -5) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_create(NULL, 1, 20, 0) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_add(NULL, 1, 1) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_cancel(NULL, 1) == 0);
    EXPECT(sl_wheel_advance(NULL, 1, NULL, NULL, 1) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_next_expiration(NULL) == -1 && sl_wheel_size(NULL) == 0);
    sl_wheel_destroy(NULL);
    EXPECT(sl_wheel_create(&w, 1, 20, 0) == 0);
    EXPECT(sl_wheel_add_many(w, NULL, NULL, 3, NULL) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_cancel_many(w, NULL, -1) == SL_TIMER_EINVAL);
    EXPECT(sl_wheel_advance(w, 5, NULL, NULL, -1) == SL_TIMER_EINVAL);
    sl_wheel_destroy(w);
}

int main(void)
{
    argument_errors();
    random_run(1, 20, 60000);
    random_run(5, 3, 60000);
    random_run(1, 2, 20000);
    bulk_run();
    deep_run();
    if (failures) {
        fprintf(stderr, "timer_leak_driver: %d expectation(s) failed\n", failures);
        return 1;
    }
    printf("timer_leak_driver: all expectations held\n");
    return 0;
}

/*
 * sl_timer.h -- a hierarchical timing wheel for delayed tasks (native/timing_wheel.c).
 *
 * The wheel holds tasks, each an int64 task id chosen by the caller, due at a
 * deadline in milliseconds on the caller's clock. The caller drives the clock
 * with sl_wheel_advance(now_ms) and receives the ids of the tasks that came
 * due; the wheel never reads a clock and never calls back, so it has no
 * threads and no locks. One wheel must not be used by two threads at once.
 *
 * Timing: a task's deadline is rounded UP to a multiple of tick_ms (its
 * "expiration"). It is handed out by the first advance whose now_ms reaches
 * that expiration: never before its deadline, and less than one tick after
 * it. With tick_ms = 1 this is exactly "deadline <= now_ms".
 *
 * Handles: adding a task returns a positive int64 handle naming it until it
 * fires or is cancelled. A handle that no longer names a pending task
 * (fired, cancelled, never issued, from another wheel's numbering) is simply
 * not found: every call accepts it safely.
 *
 * Ownership: the wheel owns all its memory; sl_wheel_destroy frees it,
 * pending tasks included. Arrays passed in are only read (or written) during
 * the call.
 *
 * Times are milliseconds. Deadlines are clamped to [0, 2^62]; start_ms must
 * be >= 0; tick_ms in [1, 2^32]; wheel_size in [2, 65536].
 */
#ifndef SL_TIMER_H
#define SL_TIMER_H

#include <stdint.h>

typedef struct sl_wheel sl_wheel;

/* Negative return codes of the functions below. */
enum {
    SL_TIMER_EINVAL = -1, /* an argument out of range, or a NULL wheel */
    SL_TIMER_ENOMEM = -2, /* malloc/realloc failed; the wheel is unchanged */
    SL_TIMER_EFULL = -3   /* more than 2^32 - 2 entries would be needed */
};

/*
 * Create a wheel whose clock starts at start_ms (its first wheel's current
 * time is start_ms rounded down to tick_ms). The first wheel covers
 * tick_ms * wheel_size ms; further (overflow) wheels are created on demand.
 * On success stores the new wheel in *out and returns 0; otherwise returns a
 * negative SL_TIMER_E* and leaves *out untouched. Free with sl_wheel_destroy.
 */
int sl_wheel_create(sl_wheel **out, int64_t tick_ms, int32_t wheel_size, int64_t start_ms);

/* Free the wheel and everything in it (pending tasks are dropped). NULL is allowed. */
void sl_wheel_destroy(sl_wheel *w);

/*
 * Add a task due delay_ms after the wheel's clock (the latest now_ms given to
 * sl_wheel_advance, or start_ms). A negative delay counts as 0. A task whose
 * expiration is not after the current tick is due at once: the next advance
 * hands it out. Returns the task's handle (> 0) or a negative SL_TIMER_E*.
 */
int64_t sl_wheel_add(sl_wheel *w, int64_t delay_ms, int64_t task_id);

/* The same with an absolute deadline on the wheel's clock. */
int64_t sl_wheel_add_at(sl_wheel *w, int64_t deadline_ms, int64_t task_id);

/*
 * Add n tasks in one call: task i is due delays_ms[i] after the wheel's
 * clock and carries task_ids[i] (task_ids NULL: its id is i). Handles are
 * written to out_handles[0..n-1] when it is not NULL. All or nothing: on an
 * error no task was added. Returns n or a negative SL_TIMER_E*.
 */
int64_t sl_wheel_add_many(sl_wheel *w, const int64_t *delays_ms, const int64_t *task_ids,
                          int64_t n, int64_t *out_handles);

/*
 * Cancel the task named by handle in O(1). Returns 1 if it was pending (it
 * will never be handed out), 0 otherwise (already fired or cancelled, or not
 * a handle of this wheel).
 */
int sl_wheel_cancel(sl_wheel *w, int64_t handle);

/* Cancel n handles; returns how many were pending (negative SL_TIMER_E* on bad arguments). */
int64_t sl_wheel_cancel_many(sl_wheel *w, const int64_t *handles, int64_t n);

/*
 * Move the wheel's clock to now_ms (a now_ms below it leaves it unchanged)
 * and take due tasks off: buckets whose expiration is <= now_ms are expired
 * one at a time in expiration order (their tasks cascading into finer wheels
 * or becoming due), and due tasks are taken as they appear, so tasks come out
 * in expiration order. The ids of the tasks taken are written to out_ids and
 * their (now stale) handles to out_handles; either array may be NULL. At most
 * cap are taken: when cap is reached the call stops expiring buckets and the
 * next call (with any now_ms) carries on where it stopped -- call again until
 * it returns less than cap. Deadlines of tasks added in between still count
 * from now_ms. Returns the number taken (0..cap) or a negative SL_TIMER_E*.
 */
int64_t sl_wheel_advance(sl_wheel *w, int64_t now_ms, int64_t *out_ids, int64_t *out_handles,
                         int64_t cap);

/*
 * The earliest time at which sl_wheel_advance has work: at most the smallest
 * pending expiration (for a task still in an overflow wheel it is the time
 * that task's bucket cascades), and at most the clock when tasks are already
 * due. -1 when no task is pending. Skips (and forgets) buckets emptied by
 * cancellation, hence not const.
 */
int64_t sl_wheel_next_expiration(sl_wheel *w);

/* Number of pending tasks (due ones included); 0 for NULL. */
int64_t sl_wheel_size(const sl_wheel *w);

/* The wheel's clock: the latest now_ms given to sl_wheel_advance, or start_ms. */
int64_t sl_wheel_now(const sl_wheel *w);

/*
 * The first wheel's current time: how far buckets have been expired, rounded
 * down to tick_ms; the clock rounded down once an advance has caught up.
 */
int64_t sl_wheel_current_ms(const sl_wheel *w);

/* Number of wheels (1 + the overflow wheels created so far). */
int32_t sl_wheel_levels(const sl_wheel *w);

/* A pending task's expiration (deadline rounded up to tick_ms); -1 if the handle is not pending. */
int64_t sl_wheel_expiration(const sl_wheel *w, int64_t handle);

/*
 * Verify every invariant listed at the top of timing_wheel.c by walking the
 * whole structure (O(entries + buckets); for tests). Returns 0 when all hold,
 * otherwise the number of the first invariant found broken.
 */
int sl_wheel_check(const sl_wheel *w);

#endif

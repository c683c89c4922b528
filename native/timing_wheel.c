/*
 * timing_wheel.c -- a hierarchical timing wheel, as in Kafka's design
 * (tickMs, wheelSize, overflow wheels, buckets kept in a delay queue), with
 * deadlines rounded up instead of down. Public interface: sl_timer.h.
 *
 * Shape. Level L (0 = the finest wheel) has tick_L = tick_ms * wheel_size^L,
 * interval_L = tick_L * wheel_size and wheel_size buckets. A task of
 * expiration E goes to the lowest level L with E < current_L + interval_L,
 * into the bucket of slot (E / tick_L) % wheel_size, whose expiration is
 * floor(E / tick_L) * tick_L. Level L + 1 (an "overflow wheel") is created the
 * first time a task does not fit level L. A binary heap over the buckets that
 * have an expiration plays the part of Kafka's DelayQueue: advance pops due
 * buckets in order and never visits an empty tick.
 *
 * Why round up: Kafka files a task under floor(expiration / tick), so it may
 * fire up to tick - 1 ms early. streamlog promises "never before the
 * deadline", so a deadline D is first rounded up to E = ceil(D / tick) * tick
 * and everything else works on E. Since E is a multiple of tick_ms, a level-0
 * bucket holds tasks of exactly one E, and a task is due exactly when the
 * clock reaches E.
 *
 * Memory. All entries (tasks, and the sentinel roots of the circular bucket
 * lists) live in one slab array and link to each other by 32-bit index, not
 * pointer: the slab can then grow with realloc, a handle can be validated
 * against it in O(1) without ever dereferencing freed memory, and entries are
 * 32 bytes. (Rejected: one malloc per task -- a pointer handle cannot be
 * checked for staleness, and malloc per add costs more than the add itself.)
 *
 * Invariants (sl_wheel_check verifies each; its return value is the number):
 *  1. Every slab entry below slab_len is exactly one of FREE (on the free
 *     list, free_count of them), SENTINEL (root of a bucket list or of the due
 *     list), or PENDING (in exactly one bucket list or the due list); lists
 *     are consistent circular doubly linked lists; size = number of PENDING.
 *  2. A PENDING entry's expiration is a multiple of tick_ms.
 *  3. clock_ms <= now_ms, and every level's current time is clock_ms rounded
 *     down to that level's tick; each tick is the level below's interval; a
 *     level whose interval would exceed the largest deadline is the top one
 *     (interval saturated) and no level sits above it.
 *  4. A PENDING entry in a bucket at level L has floor(E / tick_L) * tick_L
 *     equal to the bucket's expiration and (E / tick_L) % wheel_size equal to
 *     its slot; at level 0 this means E equals the bucket's expiration.
 *  5. A non-empty bucket has an expiration X with current_L + tick_L <= X <
 *     current_L + interval_L (so X > clock_ms). When clock_ms == now_ms (the
 *     wheel has caught up) no bucket expiration is <= now_ms.
 *  6. The heap holds exactly the buckets whose expiration is not -1, each
 *     once, with heap_pos pointing back at its slot, in heap order by
 *     expiration. Buckets emptied by cancel may stay in it (lazily dropped,
 *     as a delay queue keeps emptied lists), which keeps cancel O(1).
 *  7. Due entries have E <= current_0: they are handed out by the next
 *     advance, before any bucket entry (whose E > current_0), so tasks come
 *     out in expiration order.
 *  8. A handle is (generation << 32) | index with generation >= 1; an entry's
 *     generation changes every time it is freed, so a stale handle never
 *     names a later task in the same slot (until the 31-bit generation wraps).
 *
 * Two clocks. now_ms is the caller's clock (the latest now_ms given to
 * advance): deadlines are counted from it. clock_ms is how far buckets have
 * been expired. advance hands tasks out while it expires buckets, one bucket
 * at a time, so a task is usually handed out while the cascade that made it
 * due still has it in cache (rejected: expire everything up to now_ms first,
 * then drain -- after a long jump the due list is cold and every task costs a
 * cache miss twice). When the output fills, advance stops with clock_ms <
 * now_ms and the next call carries on; tasks added meanwhile are filed
 * against clock_ms, which is valid since their expirations are > current_0.
 */
#include "sl_timer.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NIL UINT32_MAX
#define MAX_ENTRIES ((uint64_t)UINT32_MAX) /* indices 0..UINT32_MAX - 1; UINT32_MAX is NIL */
#define MAX_DEADLINE_MS ((int64_t)1 << 62)
#define MAX_TICK_MS ((int64_t)1 << 32)
#define MAX_WHEEL_SIZE (1 << 16)
#define MAX_LEVELS 64 /* tick doubles at least per level, so 63 levels reach 2^62 */
#define GEN_MAX 0x7fffffffu
#define FIRST_SLAB_CAP 256
#define HUGE_SLAB_BYTES ((size_t)8 << 20)

enum { ST_FREE = 0, ST_PENDING = 1, ST_SENTINEL = 2 };

typedef struct {
    int64_t expiration_ms; /* E: deadline rounded up to the tick (PENDING only) */
    int64_t task_id;
    uint32_t prev, next; /* list links (next doubles as the free-list link) */
    uint32_t gen;        /* handle generation; 0 for sentinels */
    uint32_t state;
} entry;

typedef struct {
    int64_t expiration_ms; /* -1 when not in the heap */
    uint32_t root;         /* sentinel entry of the circular list */
    uint32_t heap_pos;     /* index in the heap, NIL when absent */
} bucket;

typedef struct {
    int64_t tick_ms;
    int64_t interval_ms; /* INT64_MAX for the top (saturated) level */
    int64_t current_ms;
} level;

struct sl_wheel {
    entry *slab;
    uint32_t slab_len, slab_cap; /* entries in use or freed / allocated */
    uint32_t free_head, free_count;
    bucket *buckets; /* levels * wheel_size; index = level * wheel_size + slot */
    uint32_t *heap;  /* bucket indices ordered by bucket expiration */
    uint32_t heap_len;
    int32_t nlevels;
    int32_t wheel_size;
    int64_t tick_ms;
    int64_t now_ms;   /* the caller's clock: deadlines count from it */
    int64_t clock_ms; /* buckets with expiration <= clock_ms have been expired */
    int64_t size;
    uint32_t due_root;
    level levels[MAX_LEVELS];
};

/* ---- slab ------------------------------------------------------------- */

/*
 * A big slab is touched at random (a bucket's tasks were added at unrelated
 * times), so with 4 KiB pages nearly every step of a cascade is also a TLB
 * miss; asking for transparent huge pages made the C-internal benchmark
 * about 20% faster. Only a hint: without THP nothing changes.
 */
static void advise_huge_pages(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    if (bytes < HUGE_SLAB_BYTES)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)p + bytes) & ~(page - 1);
    if (end <= first)
        return;
    (void)madvise((void *)first, end - first, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

/* Make sure `extra` entries can be taken without allocating. */
static int slab_reserve(sl_wheel *w, uint64_t extra)
{
    uint64_t avail = (uint64_t)w->free_count + (w->slab_cap - w->slab_len);
    if (avail >= extra)
        return 0;
    uint64_t need = (uint64_t)w->slab_cap + (extra - avail);
    if (need > MAX_ENTRIES)
        return SL_TIMER_EFULL;
    uint64_t cap = w->slab_cap ? w->slab_cap : FIRST_SLAB_CAP;
    while (cap < need)
        cap *= 2;
    if (cap > MAX_ENTRIES)
        cap = MAX_ENTRIES;
    entry *p = realloc(w->slab, (size_t)cap * sizeof(entry));
    if (!p)
        return SL_TIMER_ENOMEM;
    w->slab = p;
    w->slab_cap = (uint32_t)cap;
    advise_huge_pages(p, (size_t)cap * sizeof(entry));
    return 0;
}

/* Take an entry reserved with slab_reserve. Its generation is kept (fresh: 1). */
static uint32_t slab_take(sl_wheel *w)
{
    uint32_t i;
    if (w->free_head != NIL) {
        i = w->free_head;
        w->free_head = w->slab[i].next;
        w->free_count--;
    } else {
        i = w->slab_len++;
        w->slab[i].gen = 1;
    }
    return i;
}

static void slab_release(sl_wheel *w, uint32_t i)
{
    entry *e = &w->slab[i];
    e->state = ST_FREE;
    e->gen = e->gen >= GEN_MAX ? 1 : e->gen + 1;
    e->next = w->free_head;
    w->free_head = i;
    w->free_count++;
}

static inline int64_t handle_of(const sl_wheel *w, uint32_t i)
{
    return ((int64_t)w->slab[i].gen << 32) | (int64_t)i;
}

/* Index of the PENDING entry named by handle, or NIL. */
static uint32_t lookup(const sl_wheel *w, int64_t handle)
{
    if (!w || handle <= 0)
        return NIL;
    uint32_t i = (uint32_t)(handle & 0xffffffff);
    uint32_t gen = (uint32_t)(handle >> 32);
    if (i >= w->slab_len || w->slab[i].gen != gen || w->slab[i].state != ST_PENDING)
        return NIL;
    return i;
}

/* ---- intrusive circular lists (sentinel roots live in the slab) -------- */

static inline void list_init(entry *s, uint32_t root)
{
    s[root].prev = s[root].next = root;
}

static inline int list_empty(const entry *s, uint32_t root)
{
    return s[root].next == root;
}

static inline void list_push_back(entry *s, uint32_t root, uint32_t i)
{
    uint32_t tail = s[root].prev;
    s[i].prev = tail;
    s[i].next = root;
    s[tail].next = i;
    s[root].prev = i;
}

static inline void list_unlink(entry *s, uint32_t i)
{
    s[s[i].prev].next = s[i].next;
    s[s[i].next].prev = s[i].prev;
}

/* Move every entry of src to the end of dst in O(1). */
static void list_splice_back(entry *s, uint32_t dst, uint32_t src)
{
    if (list_empty(s, src))
        return;
    uint32_t first = s[src].next, last = s[src].prev, tail = s[dst].prev;
    s[tail].next = first;
    s[first].prev = tail;
    s[last].next = dst;
    s[dst].prev = last;
    list_init(s, src);
}

/* ---- bucket heap (the delay queue) ------------------------------------ */

static inline int64_t heap_key(const sl_wheel *w, uint32_t pos)
{
    return w->buckets[w->heap[pos]].expiration_ms;
}

static inline void heap_set(sl_wheel *w, uint32_t pos, uint32_t b)
{
    w->heap[pos] = b;
    w->buckets[b].heap_pos = pos;
}

static void heap_sift_up(sl_wheel *w, uint32_t pos)
{
    uint32_t b = w->heap[pos];
    int64_t key = w->buckets[b].expiration_ms;
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (heap_key(w, parent) <= key)
            break;
        heap_set(w, pos, w->heap[parent]);
        pos = parent;
    }
    heap_set(w, pos, b);
}

static void heap_sift_down(sl_wheel *w, uint32_t pos)
{
    uint32_t b = w->heap[pos];
    int64_t key = w->buckets[b].expiration_ms;
    for (;;) {
        uint32_t child = 2 * pos + 1;
        if (child >= w->heap_len)
            break;
        if (child + 1 < w->heap_len && heap_key(w, child + 1) < heap_key(w, child))
            child++;
        if (heap_key(w, child) >= key)
            break;
        heap_set(w, pos, w->heap[child]);
        pos = child;
    }
    heap_set(w, pos, b);
}

/* Give bucket b the expiration x, entering it into the heap if it was not there. */
static void bucket_set_expiration(sl_wheel *w, uint32_t b, int64_t x)
{
    bucket *bk = &w->buckets[b];
    if (bk->expiration_ms == x)
        return;
    int64_t old = bk->expiration_ms;
    bk->expiration_ms = x;
    if (bk->heap_pos == NIL) {
        /* Capacity is one slot per bucket (invariant 6), allocated with the level. */
        uint32_t pos = w->heap_len++;
        heap_set(w, pos, b);
        heap_sift_up(w, pos);
    } else if (x < old) {
        heap_sift_up(w, bk->heap_pos);
    } else {
        heap_sift_down(w, bk->heap_pos);
    }
}

/* Remove the earliest bucket from the heap and clear its expiration. */
static uint32_t heap_pop(sl_wheel *w)
{
    uint32_t b = w->heap[0];
    w->heap_len--;
    if (w->heap_len > 0) {
        heap_set(w, 0, w->heap[w->heap_len]);
        heap_sift_down(w, 0);
    }
    w->buckets[b].heap_pos = NIL;
    w->buckets[b].expiration_ms = -1;
    return b;
}

/* ---- levels ----------------------------------------------------------- */

static int level_is_top(const level *lv)
{
    return lv->interval_ms == INT64_MAX;
}

/* Create the next overflow wheel; on failure the wheel is unchanged. */
static int add_level(sl_wheel *w)
{
    int32_t n = w->nlevels;
    int32_t ws = w->wheel_size;
    if (n == MAX_LEVELS || (n > 0 && level_is_top(&w->levels[n - 1])))
        return SL_TIMER_EINVAL; /* unreachable: the top level accepts every deadline */
    int64_t tick = n == 0 ? w->tick_ms : w->levels[n - 1].interval_ms;
    int64_t below_current = n == 0 ? w->clock_ms : w->levels[n - 1].current_ms;

    int rc = slab_reserve(w, (uint64_t)ws);
    if (rc)
        return rc;
    size_t nbuckets = (size_t)(n + 1) * (size_t)ws;
    bucket *bk = realloc(w->buckets, nbuckets * sizeof(bucket));
    if (!bk)
        return SL_TIMER_ENOMEM;
    w->buckets = bk;
    uint32_t *hp = realloc(w->heap, nbuckets * sizeof(uint32_t));
    if (!hp)
        return SL_TIMER_ENOMEM;
    w->heap = hp;

    level *lv = &w->levels[n];
    lv->tick_ms = tick;
    lv->interval_ms = tick > MAX_DEADLINE_MS / ws ? INT64_MAX : tick * ws;
    lv->current_ms = below_current - below_current % tick;
    for (int32_t s = 0; s < ws; s++) {
        uint32_t root = slab_take(w);
        w->slab[root].state = ST_SENTINEL;
        w->slab[root].gen = 0;
        list_init(w->slab, root);
        bucket *b = &w->buckets[(size_t)n * ws + s];
        b->expiration_ms = -1;
        b->root = root;
        b->heap_pos = NIL;
    }
    w->nlevels = n + 1;
    return 0;
}

/* Create levels until one covers expiration e (so placing e cannot allocate). */
static int ensure_levels(sl_wheel *w, int64_t e)
{
    for (;;) {
        const level *top = &w->levels[w->nlevels - 1];
        if (e - top->current_ms < top->interval_ms)
            return 0;
        int rc = add_level(w);
        if (rc)
            return rc;
    }
}

/* Move every level's current time to t (t never decreases). */
static void clock_to(sl_wheel *w, int64_t t)
{
    w->clock_ms = t;
    for (int32_t L = 0; L < w->nlevels; L++) {
        level *lv = &w->levels[L];
        int64_t c = t - t % lv->tick_ms;
        /* A coarser level can only move when this one did. */
        if (c == lv->current_ms)
            break;
        lv->current_ms = c;
    }
}

/*
 * File unlinked entry i (its expiration set) under the current times: in the
 * due list if already due, else in the finest level that covers it. Creates
 * levels when needed, which is the only way this can fail.
 */
static int place(sl_wheel *w, uint32_t i)
{
    int64_t e = w->slab[i].expiration_ms;
    if (e <= w->levels[0].current_ms) {
        list_push_back(w->slab, w->due_root, i);
        return 0;
    }
    for (int32_t L = 0;; L++) {
        if (L == w->nlevels) {
            int rc = add_level(w);
            if (rc)
                return rc;
        }
        const level *lv = &w->levels[L];
        if (e - lv->current_ms < lv->interval_ms) {
            int64_t q = e / lv->tick_ms;
            uint32_t b = (uint32_t)L * (uint32_t)w->wheel_size + (uint32_t)(q % w->wheel_size);
            list_push_back(w->slab, w->buckets[b].root, i);
            bucket_set_expiration(w, b, q * lv->tick_ms);
            return 0;
        }
    }
}

static int64_t clamp_deadline(int64_t d)
{
    return d < 0 ? 0 : d > MAX_DEADLINE_MS ? MAX_DEADLINE_MS : d;
}

static int64_t deadline_after(const sl_wheel *w, int64_t delay_ms)
{
    if (delay_ms <= 0)
        return w->now_ms;
    return delay_ms > MAX_DEADLINE_MS - w->now_ms ? MAX_DEADLINE_MS : w->now_ms + delay_ms;
}

/*
 * The expiration of a deadline: rounded up to the tick, except that the
 * largest one is rounded down so that every expiration stays <= 2^62 and the
 * top level's window never wraps onto a slot twice.
 */
static int64_t round_up(const sl_wheel *w, int64_t deadline_ms)
{
    int64_t d = clamp_deadline(deadline_ms);
    int64_t r = d % w->tick_ms;
    if (r == 0)
        return d;
    return d - r <= MAX_DEADLINE_MS - w->tick_ms ? d - r + w->tick_ms : d - r;
}

/* place() where the levels covering the entry are known to exist, so it cannot fail. */
static void refile(sl_wheel *w, uint32_t i)
{
    int rc = place(w, i);
    assert(rc == 0);
    (void)rc;
}

/* Take a reserved entry for (e, task_id) and file it; levels covering e must exist. */
static uint32_t insert_reserved(sl_wheel *w, int64_t e, int64_t task_id)
{
    uint32_t i = slab_take(w);
    entry *en = &w->slab[i];
    en->expiration_ms = e;
    en->task_id = task_id;
    en->state = ST_PENDING;
    refile(w, i);
    w->size++;
    return i;
}

/* ---- public ------------------------------------------------------------ */

int sl_wheel_create(sl_wheel **out, int64_t tick_ms, int32_t wheel_size, int64_t start_ms)
{
    if (!out || tick_ms < 1 || tick_ms > MAX_TICK_MS || wheel_size < 2 ||
        wheel_size > MAX_WHEEL_SIZE || start_ms < 0 || start_ms > MAX_DEADLINE_MS)
        return SL_TIMER_EINVAL;
    sl_wheel *w = calloc(1, sizeof(*w));
    if (!w)
        return SL_TIMER_ENOMEM;
    w->free_head = NIL;
    w->tick_ms = tick_ms;
    w->wheel_size = wheel_size;
    w->now_ms = start_ms;
    w->clock_ms = start_ms;
    int rc = slab_reserve(w, 1);
    if (!rc) {
        w->due_root = slab_take(w);
        w->slab[w->due_root].state = ST_SENTINEL;
        w->slab[w->due_root].gen = 0;
        list_init(w->slab, w->due_root);
        rc = add_level(w);
    }
    if (rc) {
        sl_wheel_destroy(w);
        return rc;
    }
    *out = w;
    return 0;
}

void sl_wheel_destroy(sl_wheel *w)
{
    if (!w)
        return;
    free(w->slab);
    free(w->buckets);
    free(w->heap);
    free(w);
}

int64_t sl_wheel_add_at(sl_wheel *w, int64_t deadline_ms, int64_t task_id)
{
    if (!w)
        return SL_TIMER_EINVAL;
    int64_t e = round_up(w, deadline_ms);
    int rc = ensure_levels(w, e);
    if (!rc)
        rc = slab_reserve(w, 1);
    if (rc)
        return rc;
    return handle_of(w, insert_reserved(w, e, task_id));
}

int64_t sl_wheel_add(sl_wheel *w, int64_t delay_ms, int64_t task_id)
{
    if (!w)
        return SL_TIMER_EINVAL;
    return sl_wheel_add_at(w, deadline_after(w, delay_ms), task_id);
}

int64_t sl_wheel_add_many(sl_wheel *w, const int64_t *delays_ms, const int64_t *task_ids,
                          int64_t n, int64_t *out_handles)
{
    if (!w || n < 0 || (n > 0 && !delays_ms))
        return SL_TIMER_EINVAL;
    if ((uint64_t)n > MAX_ENTRIES)
        return SL_TIMER_EFULL;
    /* Allocate everything first so that the batch is all or nothing. */
    int64_t max_delay_ms = 0;
    for (int64_t k = 0; k < n; k++)
        if (delays_ms[k] > max_delay_ms)
            max_delay_ms = delays_ms[k];
    int rc = ensure_levels(w, round_up(w, deadline_after(w, max_delay_ms)));
    if (!rc)
        rc = slab_reserve(w, (uint64_t)n);
    if (rc)
        return rc;
    for (int64_t k = 0; k < n; k++) {
        int64_t e = round_up(w, deadline_after(w, delays_ms[k]));
        uint32_t i = insert_reserved(w, e, task_ids ? task_ids[k] : k);
        if (out_handles)
            out_handles[k] = handle_of(w, i);
    }
    return n;
}

int sl_wheel_cancel(sl_wheel *w, int64_t handle)
{
    uint32_t i = lookup(w, handle);
    if (i == NIL)
        return 0;
    list_unlink(w->slab, i);
    slab_release(w, i);
    w->size--;
    return 1;
}

int64_t sl_wheel_cancel_many(sl_wheel *w, const int64_t *handles, int64_t n)
{
    if (!w || n < 0 || (n > 0 && !handles))
        return SL_TIMER_EINVAL;
    int64_t cancelled = 0;
    for (int64_t k = 0; k < n; k++)
        cancelled += sl_wheel_cancel(w, handles[k]);
    return cancelled;
}

/*
 * Expire bucket b (already popped, the clock at its expiration): a level-0
 * bucket is due as a whole; a coarser one cascades, each entry re-filed one
 * or more levels down (never back into b, and never needing a new level).
 */
static void flush_bucket(sl_wheel *w, uint32_t b)
{
    uint32_t root = w->buckets[b].root;
    entry *s = w->slab;
    if (b < (uint32_t)w->wheel_size) {
        list_splice_back(s, w->due_root, root);
        return;
    }
    if (list_empty(s, root))
        return;
    /*
     * Walk the detached list from both ends at once: each step of a linked
     * walk waits for a cache miss, and two independent walks keep two misses
     * in flight. (Order within a bucket carries no meaning, so the re-filed
     * order may differ.)
     */
    uint32_t head = s[root].next, tail = s[root].prev;
    list_init(s, root);
    for (;;) {
        if (head == tail) {
            refile(w, head);
            return;
        }
        uint32_t next = s[head].next, prev = s[tail].prev;
        int meet = next == tail;
        refile(w, head);
        refile(w, tail);
        if (meet)
            return;
        head = next;
        tail = prev;
    }
}

/* Take up to cap due tasks off, in order, into the outputs; returns how many. */
static int64_t drain(sl_wheel *w, int64_t *out_ids, int64_t *out_handles, int64_t cap)
{
    entry *s = w->slab;
    uint32_t root = w->due_root;
    int64_t n = 0;
    while (n < cap && !list_empty(s, root)) {
        uint32_t i = s[root].next;
        list_unlink(s, i);
        if (out_ids)
            out_ids[n] = s[i].task_id;
        if (out_handles)
            out_handles[n] = handle_of(w, i);
        slab_release(w, i);
        n++;
    }
    w->size -= n;
    return n;
}

int64_t sl_wheel_advance(sl_wheel *w, int64_t now_ms, int64_t *out_ids, int64_t *out_handles,
                         int64_t cap)
{
    if (!w || cap < 0)
        return SL_TIMER_EINVAL;
    if (now_ms > w->now_ms)
        w->now_ms = now_ms;
    int64_t n = drain(w, out_ids, out_handles, cap);
    while (n < cap && w->heap_len > 0 && w->buckets[w->heap[0]].expiration_ms <= w->now_ms) {
        int64_t x = w->buckets[w->heap[0]].expiration_ms;
        uint32_t b = heap_pop(w);
        clock_to(w, x);
        flush_bucket(w, b);
        n += drain(w, out_ids ? out_ids + n : NULL, out_handles ? out_handles + n : NULL,
                   cap - n);
    }
    /* Caught up (no bucket left at or before now_ms): the clock may move to now_ms. */
    if (w->clock_ms < w->now_ms &&
        (w->heap_len == 0 || w->buckets[w->heap[0]].expiration_ms > w->now_ms))
        clock_to(w, w->now_ms);
    return n;
}

int64_t sl_wheel_next_expiration(sl_wheel *w)
{
    if (!w || w->size == 0)
        return -1;
    if (!list_empty(w->slab, w->due_root))
        return w->slab[w->slab[w->due_root].next].expiration_ms;
    while (w->heap_len > 0 && list_empty(w->slab, w->buckets[w->heap[0]].root))
        heap_pop(w);
    return w->heap_len > 0 ? w->buckets[w->heap[0]].expiration_ms : -1;
}

int64_t sl_wheel_size(const sl_wheel *w)
{
    return w ? w->size : 0;
}

int64_t sl_wheel_now(const sl_wheel *w)
{
    return w ? w->now_ms : SL_TIMER_EINVAL;
}

int64_t sl_wheel_current_ms(const sl_wheel *w)
{
    return w ? w->levels[0].current_ms : SL_TIMER_EINVAL;
}

int32_t sl_wheel_levels(const sl_wheel *w)
{
    return w ? w->nlevels : 0;
}

int64_t sl_wheel_expiration(const sl_wheel *w, int64_t handle)
{
    uint32_t i = lookup(w, handle);
    return i == NIL ? -1 : w->slab[i].expiration_ms;
}

/* ---- invariant check ---------------------------------------------------- */

/* Walk one list from its root: links consistent, entries PENDING. Returns its length or -1. */
static int64_t check_list(const sl_wheel *w, uint32_t root)
{
    const entry *s = w->slab;
    int64_t n = 0;
    uint32_t prev = root;
    for (uint32_t i = s[root].next; i != root; i = s[i].next) {
        if (i >= w->slab_len || s[i].state != ST_PENDING || s[i].prev != prev ||
            n > (int64_t)w->slab_len)
            return -1;
        prev = i;
        n++;
    }
    return s[root].prev == prev ? n : -1;
}

int sl_wheel_check(const sl_wheel *w)
{
    if (!w)
        return 1;
    const entry *s = w->slab;
    int32_t ws = w->wheel_size;

    /* 1: states, free list, lists, size. */
    int64_t counted[3] = {0, 0, 0};
    for (uint32_t i = 0; i < w->slab_len; i++) {
        if (s[i].state > ST_SENTINEL)
            return 1;
        counted[s[i].state]++;
    }
    uint32_t free_walk = 0;
    for (uint32_t i = w->free_head; i != NIL; i = s[i].next) {
        if (i >= w->slab_len || s[i].state != ST_FREE || ++free_walk > w->free_count)
            return 1;
    }
    if (free_walk != w->free_count || counted[ST_FREE] != (int64_t)w->free_count)
        return 1;
    if (counted[ST_SENTINEL] != 1 + (int64_t)w->nlevels * ws || counted[ST_PENDING] != w->size)
        return 1;
    int64_t due = check_list(w, w->due_root);
    if (due < 0)
        return 1;
    int64_t in_lists = due;
    for (int64_t b = 0; b < (int64_t)w->nlevels * ws; b++) {
        int64_t len = check_list(w, w->buckets[b].root);
        if (len < 0)
            return 1;
        in_lists += len;
    }
    if (in_lists != w->size)
        return 1;

    /* 2 and 7: expirations on the tick; due entries not after current_0. */
    for (uint32_t i = 0; i < w->slab_len; i++)
        if (s[i].state == ST_PENDING && s[i].expiration_ms % w->tick_ms != 0)
            return 2;
    for (uint32_t i = s[w->due_root].next; i != w->due_root; i = s[i].next)
        if (s[i].expiration_ms > w->levels[0].current_ms)
            return 7;

    /* 3: level shapes and current times. */
    for (int32_t L = 0; L < w->nlevels; L++) {
        const level *lv = &w->levels[L];
        int64_t tick = L == 0 ? w->tick_ms : w->levels[L - 1].interval_ms;
        if (w->clock_ms > w->now_ms || lv->tick_ms != tick ||
            lv->current_ms != w->clock_ms - w->clock_ms % tick)
            return 3;
        int top = tick > MAX_DEADLINE_MS / ws;
        if (top != level_is_top(lv) || (!top && lv->interval_ms != tick * ws) ||
            (top && L != w->nlevels - 1))
            return 3;
    }

    /* 4 and 5: entries in the right bucket; buckets in their window. */
    for (int32_t L = 0; L < w->nlevels; L++) {
        const level *lv = &w->levels[L];
        for (int32_t slot = 0; slot < ws; slot++) {
            const bucket *bk = &w->buckets[(size_t)L * ws + slot];
            if (list_empty(s, bk->root))
                continue;
            int64_t x = bk->expiration_ms;
            if (x < lv->current_ms + lv->tick_ms || x - lv->current_ms >= lv->interval_ms ||
                x <= w->clock_ms || (w->clock_ms == w->now_ms && x <= w->now_ms))
                return 5;
            for (uint32_t i = s[bk->root].next; i != bk->root; i = s[i].next) {
                int64_t q = s[i].expiration_ms / lv->tick_ms;
                if (q * lv->tick_ms != x || q % ws != slot)
                    return 4;
            }
        }
    }

    /* 6: the heap indexes exactly the buckets with an expiration, in heap order. */
    uint32_t with_expiration = 0;
    for (int64_t b = 0; b < (int64_t)w->nlevels * ws; b++) {
        const bucket *bk = &w->buckets[b];
        if (bk->expiration_ms == -1) {
            if (bk->heap_pos != NIL)
                return 6;
            continue;
        }
        with_expiration++;
        if (bk->heap_pos >= w->heap_len || w->heap[bk->heap_pos] != (uint32_t)b)
            return 6;
    }
    if (with_expiration != w->heap_len)
        return 6;
    for (uint32_t pos = 1; pos < w->heap_len; pos++)
        if (heap_key(w, (pos - 1) / 2) > heap_key(w, pos))
            return 6;

    /* 8: pending and free entries carry a valid generation. */
    for (uint32_t i = 0; i < w->slab_len; i++)
        if (s[i].state != ST_SENTINEL && (s[i].gen < 1 || s[i].gen > GEN_MAX))
            return 8;
    return 0;
}

/* pfc.c: PFC (IEEE 802.1Qbb) in the compiled link core; #included by linkcore.c (one translation unit).
 *
 * The same model as testbed/pfc/link.py (PfcDirection, the reference; docs/pfc.md), per direction a->b:
 *
 *   frame in on a --> ingress accounting (lossless: > xoff + headroom: drop pfc_headroom; >= xoff: PAUSE out of a)
 *                 --> lossy: tail drop, RED;  lossless: RED marks only
 *                 --> FIFO[priority]
 *   serialiser: when the wire is free, the head that may start earliest (a paused priority waits for
 *               resume_at or an XON) starts; depart accounting at the start (XON out of a at <= xon);
 *               wire loss, release = start + len/rate + delay (+ jitter) --> the release FIFO --> send on b
 *   PFC frame in on b (0x8808 / 0x0101): consumed; after the link's one-way delay (the cable back to the
 *               sender; at equal times after the other events) it pauses or resumes the a->b egress for
 *               quanta x 512 bit times of the *real* rate, x scale (dilated)
 *
 * `linkcore pfctrace --pfc SPEC [model options] --seed N` replays "T arrive|rx HEX" / "T advance" lines and
 * prints what testbed.pfc.link.trace_lines prints; the unit tests diff the two.
 * --pfc SPEC = comma-separated key=value: prios=MASK (bit p: lossless), xoff=B, xon=B, headroom=B,
 * quanta=Q, rate=REAL_BPS, scale=S, dscp=64 hex digits (priority of DSCP 0..63), src=MAC (trace only;
 * forward mode sends from each interface's own MAC); xoff_ba=B, xon_ba=B, headroom_ba=B give the b->a
 * direction its own thresholds (forward mode: a replica's host link, whose host->switch side is the NIC
 * and whose switch->host side is the switch's egress; without them both directions take xoff/xon/headroom);
 * red_off=ab / red_off=ba (either or both): that direction runs no RED although --red is given, no CE marks and
 * no early drops (a replica's host link: its NIC side; a NIC has no AQM, its queue is host memory).
 * The forwarding-loop glue is pfc_forward.c.
 */
#include <stdarg.h>
#include <sys/ioctl.h>

#define NPRIO 8
#define PFC_FRAME_LEN 60

typedef struct {
    int enabled;
    unsigned lossless;
    double xoff, xon, headroom, limit;
    double ba_xoff, ba_xon, ba_headroom;  /* the b->a direction's thresholds; ba_set: given */
    int ba_set;
    unsigned red_off;                   /* bit 0: the a->b direction runs no RED, bit 1: b->a */
    int quanta;
    double rate_real_bps, scale, pause_s, refresh_s;
    uint8_t dscp_map[64];
    uint8_t src[6];
    int wd_action;                      /* watchdog (testbed.pfc.watchdog): 0 off, 1 drop, 2 ignore */
    double wd_detect, wd_restore;       /* real seconds; x scale when used */
} pfc_params_t;

static pfc_params_t PF = {.quanta = 0xFFFF, .scale = 1.0, .src = {2, 0, 0, 0, 0, 1}};

enum { PC_RXP, PC_RXB, PC_FWP, PC_FWB, PC_TAIL, PC_RED, PC_LOSS, PC_HEADROOM, PC_WATCHDOG, PC_CE, PC_ACE, NPC };
static const char *PC_NAMES[NPC] = {"rx_packets", "rx_bytes", "forwarded_packets", "forwarded_bytes", "drop_tail",
    "drop_red", "drop_loss", "drop_pfc_headroom", "drop_pfc_watchdog", "ce_marked", "ecn_marks_already_ce"};

typedef struct { uint64_t seq; double arrival; uint8_t *buf; uint32_t len; } pfq_ent_t;
typedef struct { pfq_ent_t *e; size_t head, n, cap; } pfq_t;
typedef struct { double t; uint32_t packets; uint64_t bytes; unsigned mask; } pfc_sample_t;
/* A received PFC frame on its way back over the cable: it acts at `at`. */
typedef struct { double at; unsigned vector, times[NPRIO]; } pfc_rx_t;

/* What the model hands its caller (forward mode sends, trace mode prints). */
typedef struct {
    void *ctx;
    void (*release)(void *ctx, double release, uint8_t *buf, uint32_t len);   /* takes ownership of buf */
    void (*upstream)(void *ctx, double t, const uint8_t *frame);               /* PFC_FRAME_LEN bytes */
    void (*dropped)(void *ctx, double t, const char *reason, uint32_t len);
} pfc_sink_t;

typedef struct pfcdir {
    const params_t *P;
    mt_t rng;
    int ge_bad;
    pfc_sink_t sink;
    const uint8_t *src;
    double busy_until, last_release;
    pfq_t fifo[NPRIO];
    uint64_t seq, waiting_packets, waiting_bytes, wire_bytes;
    qent_t *wire; size_t whead, wlen, wcap;       /* started frames: (end, len) */
    uint64_t c[NPRIO][NPC];
    uint64_t max_qp, max_qb, samples_skipped;
    pfc_sample_t *samples; size_t nsamples, scap;
    double next_sample;
    /* ingress (testbed.pfc.state.PfcIngress): this direction's thresholds (PF's, or PF.ba_* for b->a) */
    double xoff, xon, headroom, limit;
    int red_off;                                  /* no RED in this direction (PF.red_off) */
    uint64_t in_bytes[NPRIO], in_max[NPRIO], pause_sent[NPRIO], xon_sent[NPRIO], hr_bytes[NPRIO];
    int xoff_on[NPRIO], has_refresh[NPRIO];
    double next_refresh[NPRIO];
    /* egress (testbed.pfc.state.PfcEgress) */
    double paused_until[NPRIO], paused_since[NPRIO], paused_total[NPRIO];
    int has_since[NPRIO], override[NPRIO];   /* override: 0 none, 1 drop, 2 ignore (watchdog) */
    double last_pause[NPRIO];
    int has_last[NPRIO];
    /* watchdog (PfcWatchdog) */
    int in_storm[NPRIO];
    double storm_since[NPRIO], storm_s[NPRIO], wd_polled;
    uint64_t storms[NPRIO], restorations[NPRIO], prio_bytes[NPRIO];
    uint64_t pause_rx[NPRIO], xon_rx[NPRIO], ignored[NPRIO], pfc_rx_frames, pfc_tx_frames;
    pfc_rx_t *rx; size_t rhead, rlen, rcap;      /* received PFC frames until they act (at + delay) */
} pfcdir_t;

static int lossless(int p) { return (PF.lossless >> p) & 1; }

static void pfc_finish_params(void) {
    PF.limit = PF.xoff + PF.headroom;
    PF.pause_s = (double)((long long)PF.quanta * 512) / PF.rate_real_bps * PF.scale;
    PF.refresh_s = 0.5 * PF.pause_s;
}

static void parse_mac(const char *s, uint8_t *mac) {
    unsigned v[6];
    if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) die("--pfc src=MAC");
    for (int i = 0; i < 6; i++) mac[i] = (uint8_t)v[i];
}

static void parse_pfc(char *spec) {
    for (int d = 0; d < 64; d++) PF.dscp_map[d] = (uint8_t)(d >> 3);
    PF.lossless = 1u << 3;
    for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) die("--pfc: expected key=value items");
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (!strcmp(k, "prios")) PF.lossless = (unsigned)strtoul(v, NULL, 10) & 0xFF;
        else if (!strcmp(k, "xoff")) PF.xoff = strtod(v, NULL);
        else if (!strcmp(k, "xon")) PF.xon = strtod(v, NULL);
        else if (!strcmp(k, "headroom")) PF.headroom = strtod(v, NULL);
        else if (!strcmp(k, "xoff_ba")) { PF.ba_xoff = strtod(v, NULL); PF.ba_set |= 1; }
        else if (!strcmp(k, "xon_ba")) { PF.ba_xon = strtod(v, NULL); PF.ba_set |= 2; }
        else if (!strcmp(k, "headroom_ba")) { PF.ba_headroom = strtod(v, NULL); PF.ba_set |= 4; }
        else if (!strcmp(k, "red_off")) {
            if (!strcmp(v, "ab")) PF.red_off |= 1;
            else if (!strcmp(v, "ba")) PF.red_off |= 2;
            else die("--pfc red_off= ab or ba (repeat the key for both)");
        }
        else if (!strcmp(k, "quanta")) PF.quanta = atoi(v);
        else if (!strcmp(k, "rate")) PF.rate_real_bps = strtod(v, NULL);
        else if (!strcmp(k, "scale")) PF.scale = strtod(v, NULL);
        else if (!strcmp(k, "src")) parse_mac(v, PF.src);
        else if (!strcmp(k, "wd_detect")) PF.wd_detect = strtod(v, NULL);
        else if (!strcmp(k, "wd_restore")) PF.wd_restore = strtod(v, NULL);
        else if (!strcmp(k, "wd_action")) {
            if (!strcmp(v, "drop")) PF.wd_action = 1;
            else if (!strcmp(v, "ignore")) PF.wd_action = 2;
            else die("--pfc wd_action= drop or ignore");
        }
        else if (!strcmp(k, "dscp")) {
            if (strlen(v) != 64) die("--pfc dscp=: 64 hex digits, the priority of DSCP 0..63");
            for (int d = 0; d < 64; d++) {
                int x = hexval(v[d]);
                if (x < 0 || x > 7) die("--pfc dscp=: priorities are 0..7");
                PF.dscp_map[d] = (uint8_t)x;
            }
        } else die("--pfc: unknown key (prios, xoff, xon, headroom, xoff_ba, xon_ba, headroom_ba, red_off, "
                   "quanta, rate, scale, dscp, src, wd_detect, wd_restore, wd_action)");
    }
    if (!(PF.rate_real_bps > 0)) die("--pfc rate= (the real line rate, bit/s) must be positive");
    if (PF.wd_action && !(PF.wd_detect > 0 && PF.wd_restore > 0)) die("--pfc: wd_detect and wd_restore must be > 0");
    if (!(PF.xon < PF.xoff) || PF.quanta < 1 || PF.quanta > 0xFFFF || !(PF.scale > 0))
        die("--pfc: needs xon < xoff, quanta 1..65535, scale > 0");
    if (PF.ba_set && (PF.ba_set != 7 || !(PF.ba_xon < PF.ba_xoff) || !(PF.ba_headroom > 0)))
        die("--pfc: xoff_ba, xon_ba and headroom_ba go together, with xon_ba < xoff_ba and headroom_ba > 0");
    PF.enabled = 1;
    pfc_finish_params();
}

/* ---------------------------------------------------------------- frames (testbed/pfc/wire.py) */
static int frame_priority(const uint8_t *f, size_t n) {
    size_t off = 0;
    int et = l3(f, n, &off), dscp = -1;
    if (et == 0x0800 && n >= off + 20 && f[off] >> 4 == 4) dscp = f[off + 1] >> 2;
    else if (et == 0x86DD && n >= off + 40 && f[off] >> 4 == 6) dscp = (((f[off] & 0x0F) << 4) | (f[off + 1] >> 4)) >> 2;
    return dscp < 0 ? 0 : PF.dscp_map[dscp];
}

/* Decode a PFC frame: 1 and the enable vector (low octet) + times, or 0 when it is not one. */
static int pfc_decode(const uint8_t *f, size_t n, unsigned *vector, unsigned times[NPRIO]) {
    if (n < 32 || f[12] != 0x88 || f[13] != 0x08 || f[14] != 0x01 || f[15] != 0x01) return 0;
    *vector = f[17];
    for (int p = 0; p < NPRIO; p++) times[p] = (unsigned)(f[18 + 2 * p] << 8 | f[19 + 2 * p]);
    return 1;
}

static void pfc_encode(uint8_t *out, const uint8_t *src, unsigned vector, const unsigned times[NPRIO]) {
    static const uint8_t dst[6] = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01};
    memset(out, 0, PFC_FRAME_LEN);
    memcpy(out, dst, 6);
    memcpy(out + 6, src, 6);
    out[12] = 0x88; out[13] = 0x08; out[14] = 0x01; out[15] = 0x01;
    out[16] = (uint8_t)(vector >> 8); out[17] = (uint8_t)vector;
    for (int p = 0; p < NPRIO; p++) { out[18 + 2 * p] = (uint8_t)(times[p] >> 8); out[19 + 2 * p] = (uint8_t)times[p]; }
}

static void emit(pfcdir_t *d, double t, unsigned vector, const unsigned times[NPRIO]) {
    uint8_t f[PFC_FRAME_LEN];
    pfc_encode(f, d->src, vector, times);
    d->pfc_tx_frames++;
    d->sink.upstream(d->sink.ctx, t, f);
}

/* ---------------------------------------------------------------- ingress (PfcIngress) */
static void in_pause(pfcdir_t *d, double now, unsigned mask) {
    unsigned times[NPRIO] = {0};
    for (int p = 0; p < NPRIO; p++) {
        if (!(mask >> p & 1)) continue;
        d->xoff_on[p] = 1;
        d->has_refresh[p] = 1;
        d->next_refresh[p] = now + PF.refresh_s;
        d->pause_sent[p]++;
        times[p] = (unsigned)PF.quanta;
    }
    emit(d, now, mask, times);
}

static int in_next_deadline(const pfcdir_t *d, double *t) {
    int any = 0;
    for (int p = 0; p < NPRIO; p++)
        if (d->has_refresh[p] && (!any || d->next_refresh[p] < *t)) { *t = d->next_refresh[p]; any = 1; }
    return any;
}

static void in_tick(pfcdir_t *d, double now) {
    unsigned due = 0;
    for (int p = 0; p < NPRIO; p++)
        if (d->has_refresh[p] && d->next_refresh[p] <= now) due |= 1u << p;
    if (due) in_pause(d, now, due);
}

static void in_depart(pfcdir_t *d, double now, int p, uint32_t len) {
    if (!lossless(p)) return;
    uint64_t b = d->in_bytes[p] - len;
    d->in_bytes[p] = b;
    if (d->xoff_on[p] && (double)b <= d->xon) {
        d->xoff_on[p] = 0;
        d->has_refresh[p] = 0;
        d->xon_sent[p]++;
        unsigned times[NPRIO] = {0};
        emit(d, now, 1u << p, times);
    }
}

/* ---------------------------------------------------------------- egress (PfcEgress) */
static void eg_close(pfcdir_t *d, int p, double at) {
    if (d->has_since[p]) {
        double x = at - d->paused_since[p];
        d->paused_total[p] += x > 0.0 ? x : 0.0;
        d->has_since[p] = 0;
    }
}

static void eg_receive(pfcdir_t *d, double now, unsigned vector, const unsigned times[NPRIO]) {
    for (int p = 0; p < NPRIO; p++) {
        if (!(vector >> p & 1)) continue;
        if (!lossless(p)) { d->ignored[p]++; continue; }
        if (d->has_since[p] && d->paused_until[p] <= now) eg_close(d, p, d->paused_until[p]);
        if (times[p] == 0) {
            d->xon_rx[p]++;
            if (d->has_since[p]) eg_close(d, p, now);
            d->paused_until[p] = now;
            continue;
        }
        d->pause_rx[p]++;
        d->last_pause[p] = now;
        d->has_last[p] = 1;
        if (!d->has_since[p]) { d->has_since[p] = 1; d->paused_since[p] = now; }
        d->paused_until[p] = now + (double)((long long)times[p] * 512) / PF.rate_real_bps * PF.scale;
    }
}

static int eg_paused(const pfcdir_t *d, double now, int p) { return now < d->paused_until[p]; }

static double eg_paused_time(const pfcdir_t *d, double now, int p) {
    double total = d->paused_total[p];
    if (d->has_since[p]) {
        double end = now < d->paused_until[p] ? now : d->paused_until[p], x = end - d->paused_since[p];
        total += x > 0.0 ? x : 0.0;
    }
    return total;
}

static unsigned paused_mask(const pfcdir_t *d, double now) {
    unsigned m = 0;
    for (int p = 0; p < NPRIO; p++) if (lossless(p) && eg_paused(d, now, p)) m |= 1u << p;
    return m;
}

/* ---------------------------------------------------------------- watchdog (PfcWatchdog) */
static double wd_quiet_since(const pfcdir_t *d, int p) {
    return (!d->has_last[p] || d->last_pause[p] < d->storm_since[p]) ? d->storm_since[p] : d->last_pause[p];
}

static void wd_poll(pfcdir_t *d, double t) {
    if (t > d->wd_polled) d->wd_polled = t;
    double detect = PF.wd_detect * PF.scale, restore = PF.wd_restore * PF.scale;
    for (int p = 0; p < NPRIO; p++) {
        if (!lossless(p)) continue;
        if (!d->in_storm[p]) {
            if (eg_paused(d, t, p) && d->has_since[p] && d->prio_bytes[p] > 0 && t - d->paused_since[p] >= detect) {
                d->in_storm[p] = 1;
                d->storm_since[p] = t;
                d->override[p] = PF.wd_action;
                d->storms[p]++;
            }
        } else if (t - wd_quiet_since(d, p) >= restore) {
            d->in_storm[p] = 0;
            d->storm_s[p] += t - d->storm_since[p];
            d->override[p] = 0;
            d->restorations[p]++;
        }
    }
}

/* PfcWatchdog.next_deadline(wd_polled): 1 and *t, or 0. */
static int wd_due(const pfcdir_t *d, double *t) {
    if (!PF.wd_action) return 0;
    double now = d->wd_polled, detect = PF.wd_detect * PF.scale, restore = PF.wd_restore * PF.scale;
    int any = 0;
    for (int p = 0; p < NPRIO; p++) {
        if (!lossless(p)) continue;
        double due;
        if (d->in_storm[p]) due = wd_quiet_since(d, p) + restore;
        else if (eg_paused(d, now, p) && d->has_since[p]) due = d->paused_since[p] + detect;
        else continue;
        if (due > now && (!any || due < *t)) { *t = due; any = 1; }
    }
    return any;
}

/* ---------------------------------------------------------------- the direction (PfcDirection) */
/* The direction's ingress thresholds: PF's, or with ba (the b->a direction) PF.ba_* when given; and whether
 * it runs RED (PF.red_off). */
static void pfcdir_thresholds(pfcdir_t *d, int ba) {
    int own = ba && PF.ba_set;
    d->xoff = own ? PF.ba_xoff : PF.xoff;
    d->xon = own ? PF.ba_xon : PF.xon;
    d->headroom = own ? PF.ba_headroom : PF.headroom;
    d->limit = d->xoff + d->headroom;
    d->red_off = (PF.red_off >> (ba ? 1 : 0)) & 1;
}

static void pfcdir_init(pfcdir_t *d, const params_t *P, unsigned long long seed, pfc_sink_t sink, const uint8_t *src) {
    memset(d, 0, sizeof *d);
    d->P = P;
    mt_seed(&d->rng, seed);
    d->sink = sink;
    d->src = src;
    d->wcap = 256;
    d->wire = xrealloc(NULL, d->wcap * sizeof *d->wire);
    pfcdir_thresholds(d, 0);
}

static void drain_wire(pfcdir_t *d, double now) {
    while (d->wlen && d->wire[d->whead].depart <= now) {
        d->wire_bytes -= d->wire[d->whead].len;
        d->whead = (d->whead + 1) % d->wcap;
        d->wlen--;
    }
}

static void wire_push(pfcdir_t *d, double end, uint32_t len) {
    if (d->wlen == d->wcap) {
        size_t ncap = d->wcap * 2;
        qent_t *nw = xrealloc(NULL, ncap * sizeof *nw);
        for (size_t i = 0; i < d->wlen; i++) nw[i] = d->wire[(d->whead + i) % d->wcap];
        free(d->wire);
        d->wire = nw; d->wcap = ncap; d->whead = 0;
    }
    d->wire[(d->whead + d->wlen) % d->wcap] = (qent_t){end, len};
    d->wlen++;
}

static void fifo_push(pfq_t *q, pfq_ent_t e) {
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 256;
        pfq_ent_t *ne = xrealloc(NULL, ncap * sizeof *ne);
        for (size_t i = 0; i < q->n; i++) ne[i] = q->e[(q->head + i) % q->cap];
        free(q->e);
        q->e = ne; q->cap = ncap; q->head = 0;
    }
    q->e[(q->head + q->n) % q->cap] = e;
    q->n++;
}

static int lost_pfc(pfcdir_t *d) {
    const params_t *P = d->P;
    if (P->loss == 1) return mt_random(&d->rng) < P->loss_rate;
    if (d->ge_bad) {
        if (mt_random(&d->rng) < P->ge_r) d->ge_bad = 0;
    } else if (mt_random(&d->rng) < P->ge_p) {
        d->ge_bad = 1;
    }
    return mt_random(&d->rng) < (d->ge_bad ? P->loss_bad : P->loss_good);
}

/* The priority whose head may start first, and when; -1 when nothing waits. */
static int next_start(const pfcdir_t *d, double *when) {
    int best = -1;
    double bs = 0;
    uint64_t bseq = 0;
    for (int p = 0; p < NPRIO; p++) {
        const pfq_t *q = &d->fifo[p];
        if (!q->n) continue;
        const pfq_ent_t *h = &q->e[q->head];
        double s = d->busy_until > h->arrival ? d->busy_until : h->arrival;
        if (d->override[p] == 0) {
            if (eg_paused(d, s, p)) s = d->paused_until[p];
        } else if (s < d->storm_since[p]) {
            s = d->storm_since[p];  /* held until the watchdog declared the storm */
        }
        if (best < 0 || s < bs || (s == bs && h->seq < bseq)) { best = p; bs = s; bseq = h->seq; }
    }
    *when = bs;
    return best;
}

static int pfcdir_next_event(const pfcdir_t *d, double *t) {
    double s = 0, r = 0, w = 0;
    int p = next_start(d, &s), has_r = in_next_deadline(d, &r), has_w = wd_due(d, &w), any = 0;
    if (p >= 0) { *t = s; any = 1; }
    if (has_r && (!any || r < *t)) { *t = r; any = 1; }
    if (has_w && (!any || w < *t)) { *t = w; any = 1; }
    if (d->rlen && (!any || d->rx[d->rhead].at < *t)) { *t = d->rx[d->rhead].at; any = 1; }
    return any;
}

static void record(pfcdir_t *d, double now, uint64_t packets, uint64_t bytes);

/* The oldest received PFC frame reaches the sender at its time: pause or resume (PfcDirection._act). */
static void rx_act(pfcdir_t *d) {
    pfc_rx_t r = d->rx[d->rhead];
    d->rhead = (d->rhead + 1) % d->rcap;
    d->rlen--;
    eg_receive(d, r.at, r.vector, r.times);
    drain_wire(d, r.at);  /* a pause state change is a sample (the series shows every one) */
    record(d, r.at, d->waiting_packets + d->wlen, d->waiting_bytes + d->wire_bytes);
}

static void pfcdir_advance(pfcdir_t *d, double now) {
    for (;;) {
        double s = 0, due = 0, wd = 0;
        int p = next_start(d, &s), has_due = in_next_deadline(d, &due), has_wd = wd_due(d, &wd);
        if (d->rlen) {
            double rx = d->rx[d->rhead].at;
            if (rx <= now && (p < 0 || rx < s) && (!has_due || rx < due) && (!has_wd || rx < wd)) {
                rx_act(d);
                continue;
            }
        }
        if (has_wd && wd <= now && (p < 0 || wd < s) && (!has_due || wd < due)) { wd_poll(d, wd); continue; }
        if (has_due && due <= now && (p < 0 || due < s)) { in_tick(d, due); continue; }
        if (p < 0 || s > now) return;
        pfq_t *q = &d->fifo[p];
        pfq_ent_t e = q->e[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        d->waiting_packets--;
        d->waiting_bytes -= e.len;
        d->prio_bytes[p] -= e.len;
        in_depart(d, s, p, e.len);
        uint64_t *c = d->c[p];
        if (lossless(p) && d->override[p] == 1) {
            c[PC_WATCHDOG]++;
            d->sink.dropped(d->sink.ctx, s, "pfc_watchdog", e.len);
            free(e.buf);
            continue;
        }
        double end = s + (double)e.len / d->P->rate_Bps;
        d->busy_until = end;
        wire_push(d, end, e.len);
        d->wire_bytes += e.len;
        if (d->P->loss && lost_pfc(d)) {
            c[PC_LOSS]++;
            d->sink.dropped(d->sink.ctx, s, "loss", e.len);
            free(e.buf);
            continue;
        }
        double rel = end + d->P->delay;
        if (d->P->jitter > 0) {
            rel += -d->P->jitter + (d->P->jitter - -d->P->jitter) * mt_random(&d->rng);
            if (rel < end) rel = end;
        }
        if (rel < d->last_release) rel = d->last_release;
        d->last_release = rel;
        c[PC_FWP]++;
        c[PC_FWB] += e.len;
        d->sink.release(d->sink.ctx, rel, e.buf, e.len);
    }
}

static void record(pfcdir_t *d, double now, uint64_t packets, uint64_t bytes) {
    if (d->nsamples < d->P->max_samples) {
        if (d->nsamples == d->scap) {
            d->scap = d->scap ? d->scap * 2 : 4096;
            d->samples = xrealloc(d->samples, d->scap * sizeof *d->samples);
        }
        d->samples[d->nsamples++] = (pfc_sample_t){now, (uint32_t)packets, bytes, paused_mask(d, now)};
    } else {
        d->samples_skipped++;
    }
}

enum { PF_QUEUED, PF_CE, PF_ACE, PF_TAIL, PF_RED, PF_HEADROOM };
static const char *PF_FATE[] = {"queued", "ce", "already_ce", "tail", "red", "pfc_headroom"};

/* PfcDirection.admit; the frame is copied when it is queued. */
static int pfcdir_admit(pfcdir_t *d, double now, uint8_t *frame, uint32_t len) {
    const params_t *P = d->P;
    pfcdir_advance(d, now);
    int p = frame_priority(frame, len), fate = PF_QUEUED;
    uint64_t *c = d->c[p];
    c[PC_RXP]++;
    c[PC_RXB] += len;
    drain_wire(d, now);
    uint64_t qlen = d->waiting_packets + d->wlen, qbytes = d->waiting_bytes + d->wire_bytes;
    int ll = lossless(p);
    if (ll) {
        uint64_t b = d->in_bytes[p];
        if ((double)(b + len) > d->limit) {
            c[PC_HEADROOM]++;
            d->hr_bytes[p] += len;
            return PF_HEADROOM;
        }
        b += len;
        d->in_bytes[p] = b;
        if (b > d->in_max[p]) d->in_max[p] = b;
        if ((double)b >= d->xoff && !d->xoff_on[p]) in_pause(d, now, 1u << p);
    } else if (P->limit_bytes ? ((double)(qbytes + len) > P->limit) : ((double)(qlen + 1) > P->limit)) {
        c[PC_TAIL]++;
        return PF_TAIL;
    }
    if (P->red && !d->red_off) {
        double pr = red_probability(P, P->red_bytes ? (double)qbytes : (double)qlen);
        if (pr > 0 && (pr >= 1.0 || mt_random(&d->rng) < pr)) {
            int code = P->red_ecn ? ecn_codepoint(frame, len) : NOT_ECT;
            if ((code == ECT0 || code == ECT1) && set_ce(frame, len) == 0) {
                c[PC_CE]++;
                fate = PF_CE;
            } else if (code == CE) {
                c[PC_ACE]++;
                fate = PF_ACE;
            } else if (!ll) {
                c[PC_RED]++;
                return PF_RED;
            }
        }
    }
    uint8_t *buf = xrealloc(NULL, len ? len : 1);
    memcpy(buf, frame, len);
    fifo_push(&d->fifo[p], (pfq_ent_t){d->seq++, now, buf, len});
    d->waiting_packets++;
    d->waiting_bytes += len;
    d->prio_bytes[p] += len;
    if (qlen + 1 > d->max_qp) d->max_qp = qlen + 1;
    if (qbytes + len > d->max_qb) d->max_qb = qbytes + len;
    if (now >= d->next_sample) {
        d->next_sample = now + P->sample_interval;
        record(d, now, qlen + 1, qbytes + len);
    }
    pfcdir_advance(d, now);
    if (PF.wd_action) wd_poll(d, now);  /* a queue filled: detection may be due */
    return fate;
}

/* A frame from downstream: a PFC frame is consumed (1) and, one cable delay later, pauses/resumes this
 * direction; else 0. */
static int pfcdir_receive(pfcdir_t *d, double now, const uint8_t *frame, uint32_t len) {
    unsigned vector, times[NPRIO];
    if (!pfc_decode(frame, len, &vector, times)) return 0;
    d->pfc_rx_frames++;
    if (d->rlen == d->rcap) {
        size_t ncap = d->rcap ? d->rcap * 2 : 16;
        pfc_rx_t *nr = xrealloc(NULL, ncap * sizeof *nr);
        for (size_t i = 0; i < d->rlen; i++) nr[i] = d->rx[(d->rhead + i) % d->rcap];
        free(d->rx);
        d->rx = nr; d->rcap = ncap; d->rhead = 0;
    }
    pfc_rx_t *r = &d->rx[(d->rhead + d->rlen++) % d->rcap];
    r->at = now + d->P->delay;  /* acts when it reaches the sender, one cable later */
    r->vector = vector;
    memcpy(r->times, times, sizeof r->times);
    pfcdir_advance(d, now);
    return 1;
}

static uint64_t pfc_sum(const pfcdir_t *d, int k) {
    uint64_t s = 0;
    for (int p = 0; p < NPRIO; p++) s += d->c[p][k];
    return s;
}

/* ---------------------------------------------------------------- pfctrace mode (no root) */
typedef struct { char *buf; size_t n, cap; } sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->buf + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) { b->n += (size_t)k; return; }
        b->cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        b->buf = xrealloc(b->buf, b->cap);
    }
}

static sbuf_t tr_tx, tr_drop, tr_up;

static void tr_release(void *ctx, double rel, uint8_t *buf, uint32_t len) {
    (void)ctx;
    sb_printf(&tr_tx, " tx %.17g %u", rel, len);
    free(buf);
}

static void tr_upstream(void *ctx, double t, const uint8_t *f) {
    (void)ctx;
    sb_printf(&tr_up, " up %.17g ", t);
    for (int i = 0; i < PFC_FRAME_LEN; i++) sb_printf(&tr_up, "%02x", f[i]);
}

static void tr_dropped(void *ctx, double t, const char *reason, uint32_t len) {
    (void)ctx;
    sb_printf(&tr_drop, " drop %s %.17g %u", reason, t, len);
}

static int run_pfctrace(void) {
    if (!PF.enabled) die("pfctrace needs --pfc SPEC");
    if (!(P.rate_Bps > 0)) die("pfctrace needs --rate-bps (a PFC link has a queue)");
    static pfcdir_t d;
    pfcdir_init(&d, &P, opt_seed, (pfc_sink_t){NULL, tr_release, tr_upstream, tr_dropped}, PF.src);
    pfcdir_thresholds(&d, opt_trace_ba);   /* --trace-ba: the b->a direction's (xoff_ba, ..., red_off=ba) */
    static char line[2 * 65536 + 64];
    static uint8_t frame[65536];
    double now = 0;
    sbuf_t *bufs[3] = {&tr_tx, &tr_drop, &tr_up};
    for (int i = 0; i < 3; i++) { bufs[i]->cap = 4096; bufs[i]->buf = xrealloc(NULL, bufs[i]->cap); }
    while (fgets(line, sizeof line, stdin)) {
        char *end, ev[16];
        if (line[0] == '#' || line[0] == '\n') continue;
        now = strtod(line, &end);
        int k = 0;
        while (*end == ' ') end++;
        while (*end && *end != ' ' && *end != '\n' && k < 15) ev[k++] = *end++;
        ev[k] = 0;
        while (*end == ' ') end++;
        uint32_t n = 0;
        for (; hexval(end[0]) >= 0 && hexval(end[1]) >= 0 && n < sizeof frame; end += 2)
            frame[n++] = (uint8_t)(hexval(end[0]) << 4 | hexval(end[1]));
        tr_tx.n = tr_drop.n = tr_up.n = 0;
        tr_tx.buf[0] = tr_drop.buf[0] = tr_up.buf[0] = 0;
        const char *head;
        if (!strcmp(ev, "arrive")) head = PF_FATE[pfcdir_admit(&d, now, frame, n)];
        else if (!strcmp(ev, "rx")) head = pfcdir_receive(&d, now, frame, n) ? "pfc" : "data";
        else if (!strcmp(ev, "advance")) { pfcdir_advance(&d, now); head = "-"; }
        else die("pfctrace: events are arrive, rx, advance");
        printf("%s%s%s%s\n", head, tr_tx.buf, tr_drop.buf, tr_up.buf);
    }
    for (int p = 0; p < NPRIO; p++) {
        printf("prio %d", p);
        for (int k = 0; k < NPC; k++) printf(" %s=%llu", PC_NAMES[k], (unsigned long long)d.c[p][k]);
        putchar('\n');
    }
    for (int p = 0; p < NPRIO; p++) {
        if (!lossless(p)) continue;
        printf("pfc %d pause_sent=%llu xon_sent=%llu pause_received=%llu xon_received=%llu max_bytes=%llu "
               "paused_s=%.17g\n", p, (unsigned long long)d.pause_sent[p], (unsigned long long)d.xon_sent[p],
               (unsigned long long)d.pause_rx[p], (unsigned long long)d.xon_rx[p], (unsigned long long)d.in_max[p],
               eg_paused_time(&d, now, p));
    }
    for (int p = 0; p < NPRIO && PF.wd_action; p++) {
        if (!lossless(p)) continue;
        printf("watchdog %d storms=%llu restorations=%llu storm_s=%.17g in_storm=%d\n", p,
               (unsigned long long)d.storms[p], (unsigned long long)d.restorations[p], d.storm_s[p], d.in_storm[p]);
    }
    printf("queue max_packets=%llu max_bytes=%llu samples=%zu\n", (unsigned long long)d.max_qp,
           (unsigned long long)d.max_qb, d.nsamples);
    return 0;
}

#include "pfc_forward.c"

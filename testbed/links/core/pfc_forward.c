/* pfc_forward.c: the PFC model of pfc.c behind linkcore's AF_PACKET forwarding loop (root); #included by
 * pfc.c, after it linkcore.c's path_t and paths[] are known.
 *
 *   frame read on path p's rx:  PFC frame -> the *other* direction's egress (its frames leave by this
 *                               interface); data -> p's model.  PAUSE/XON p emits -> sent on p's rx socket,
 *                               from that interface's MAC.  Started frames -> p's release FIFO.
 * Also here: the stats JSON of a PFC direction, the emulator's PFC lag and the PFC event log.
 */
/* ---------------------------------------------------------------- forward mode glue (root) */
static uint8_t g_pfc_src[2][6];
static uint64_t g_pfc_tx_errors[2];
/* Emulator lag of PFC, per direction (index of the path whose model it concerns): how long after its model
 * time a PAUSE/XON left (the data frame that crossed a threshold was read late), and how long after its
 * kernel arrival stamp a received PFC frame reached the model (it acts one link delay after that stamp: only
 * a lag beyond the delay lets through frames that should have been held). */
typedef struct { uint64_t n; double sum, max; } lag_t;
static lag_t g_tx_lag[2], g_rx_lag[2];
/* The first PFC_EVENTS PFC frames sent and received per direction, (model or arrival time, time it left or
 * reached the model, 1 = PAUSE / 0 = XON), on CLOCK_MONOTONIC, which every process on the machine shares:
 * `testbed bench pfc` pairs the bottleneck's sends with a sender's receptions for the reaction time. */
#define PFC_EVENTS 20000
typedef struct { double t0, t1; int pause; } pfc_event_t;
static pfc_event_t *g_tx_ev[2], *g_rx_ev[2];
static size_t g_tx_nev[2], g_rx_nev[2];

static void event_add(pfc_event_t **ev, size_t *n, double t0, double t1, int pause) {
    if (*n >= PFC_EVENTS) return;
    if (!*ev) *ev = xrealloc(NULL, PFC_EVENTS * sizeof **ev);
    (*ev)[(*n)++] = (pfc_event_t){t0, t1, pause};
}

static int any_pause(const uint8_t *f) {
    for (int p = 0; p < NPRIO; p++) if ((f[17] >> p & 1) && (f[18 + 2 * p] | f[19 + 2 * p])) return 1;
    return 0;
}

static void lag_add(lag_t *l, double x) {
    if (x < 0) x = 0;
    l->n++;
    l->sum += x;
    if (x > l->max) l->max = x;
}

static void fw_release(void *ctx, double rel, uint8_t *buf, uint32_t len) {
    pend_push((path_t *)ctx, rel, buf, len);
    free(buf);
}

/* PAUSE/XON of direction d leave by the interface its data came in on (its rx socket). */
static void fw_upstream(void *ctx, double t, const uint8_t *f) {
    path_t *p = ctx;
    double sent = mono();
    lag_add(&g_tx_lag[p - paths], sent - t);
    event_add(&g_tx_ev[p - paths], &g_tx_nev[p - paths], t, sent, any_pause(f));
    if (send(p->rx, f, PFC_FRAME_LEN, MSG_DONTWAIT) < 0) g_pfc_tx_errors[p - paths]++;
}

static void fw_dropped(void *ctx, double t, const char *reason, uint32_t len) { (void)ctx; (void)t; (void)reason; (void)len; }

static void if_mac(const char *ifname, uint8_t *mac) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) die("--pfc: cannot read the interface's MAC address");
    close(fd);
    memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
}

static void pfc_forward_init(void) {
    if (!PF.enabled) return;
    if (!(P.rate_Bps > 0)) die("--pfc needs --rate-bps (a PFC link has a queue)");
    if (opt_bare) die("--pfc and --bare exclude each other");
    static pfcdir_t dirs[2];
    for (int d = 0; d < 2; d++) {
        if_mac(intf_names[d], g_pfc_src[d]);
        pfcdir_init(&dirs[d], &PD[d], d ? opt_seed_ba : opt_seed_ab,
                    (pfc_sink_t){&paths[d], fw_release, fw_upstream, fw_dropped}, g_pfc_src[d]);
        pfcdir_thresholds(&dirs[d], d);
        paths[d].pfc = &dirs[d];
    }
}

/* A frame read from path p's rx socket: 1 when PFC took it (a PFC frame pauses the *other* direction,
 * whose egress leaves by this interface; a data frame enters p's model), 0 without --pfc. */
static int pfc_on_frame(path_t *p, double arrival, uint8_t *frame, uint32_t len) {
    if (!p->pfc) return 0;
    path_t *other = &paths[1 - (p - paths)];
    double before = mono();
    if (pfcdir_receive(other->pfc, arrival, frame, len)) {
        lag_add(&g_rx_lag[other - paths], before - arrival);
        event_add(&g_rx_ev[other - paths], &g_rx_nev[other - paths], arrival, before, any_pause(frame));
        return 1;
    }
    pfcdir_admit(p->pfc, arrival, frame, len);
    return 1;
}

/* Start what is due; returns the next time the model has work (0: none). */
static double pfc_service(path_t *p) {
    if (!p->pfc) return 0;
    double t;
    pfcdir_advance(p->pfc, mono());
    return pfcdir_next_event(p->pfc, &t) ? t : 0;
}

static size_t pfc_waiting(const path_t *p) { return p->pfc ? (size_t)p->pfc->waiting_packets : 0; }

/* The model's counters under the keys every core writes (the ledger reads them). */
static void pfc_sync(path_t *p) {
    pfcdir_t *d = p->pfc;
    if (!d) return;
    model_t *m = &p->m;
    m->c[C_RXP] = pfc_sum(d, PC_RXP); m->c[C_RXB] = pfc_sum(d, PC_RXB);
    m->c[C_FWP] = pfc_sum(d, PC_FWP); m->c[C_FWB] = pfc_sum(d, PC_FWB);
    m->c[C_LOSS] = pfc_sum(d, PC_LOSS); m->c[C_RED] = pfc_sum(d, PC_RED); m->c[C_TAIL] = pfc_sum(d, PC_TAIL);
    m->c[C_CE] = pfc_sum(d, PC_CE); m->c[C_ACE] = pfc_sum(d, PC_ACE);
    m->max_qp = d->max_qp; m->max_qb = d->max_qb; m->samples_skipped = d->samples_skipped;
}

static void pfc_stats_json(FILE *f, path_t *p, int with_series) {
    pfcdir_t *d = p->pfc;
    if (!d) return;
    double now = mono();
    int idx = (int)(p - paths);
    fprintf(f, ", \"drop_pfc\": %llu, \"priorities\": {",
            (unsigned long long)(pfc_sum(d, PC_HEADROOM) + pfc_sum(d, PC_WATCHDOG)));
    int first = 1;
    for (int q = 0; q < NPRIO; q++) {
        if (!d->c[q][PC_RXP]) continue;
        fprintf(f, "%s\"%d\": {", first ? "" : ", ", q);
        first = 0;
        for (int k = 0; k < NPC; k++) fprintf(f, "%s\"%s\": %llu", k ? ", " : "", PC_NAMES[k], (unsigned long long)d->c[q][k]);
        fprintf(f, ", \"queued_packets\": %zu}", d->fifo[q].n);
    }
    fprintf(f, "}, \"pfc\": {\"pfc_rx_frames\": %llu, \"pfc_tx_frames\": %llu, \"pfc_tx_errors\": %llu, "
            "\"rate_real_bps\": %.17g, \"scale\": %.17g, \"xoff_bytes\": %.17g, \"xon_bytes\": %.17g, "
            "\"headroom_bytes\": %.17g, \"red\": %s, \"quanta\": %d, \"pause_s\": %.17g, \"paused_now\": %u, "
            "\"tx_lag\": {\"count\": %llu, \"mean_s\": %.9g, \"max_s\": %.9g}, "
            "\"rx_lag\": {\"count\": %llu, \"mean_s\": %.9g, \"max_s\": %.9g}, \"ingress\": {",
            (unsigned long long)d->pfc_rx_frames, (unsigned long long)d->pfc_tx_frames,
            (unsigned long long)g_pfc_tx_errors[idx], PF.rate_real_bps, PF.scale, d->xoff, d->xon, d->headroom,
            d->P->red && !d->red_off ? "true" : "false", PF.quanta, PF.pause_s, paused_mask(d, now),
            (unsigned long long)g_tx_lag[idx].n,
            g_tx_lag[idx].n ? g_tx_lag[idx].sum / g_tx_lag[idx].n : 0.0, g_tx_lag[idx].max,
            (unsigned long long)g_rx_lag[idx].n, g_rx_lag[idx].n ? g_rx_lag[idx].sum / g_rx_lag[idx].n : 0.0,
            g_rx_lag[idx].max);
    first = 1;
    for (int q = 0; q < NPRIO; q++) {
        if (!lossless(q)) continue;
        fprintf(f, "%s\"%d\": {\"pause_sent\": %llu, \"xon_sent\": %llu, \"drop_pfc_headroom\": %llu, "
                "\"drop_pfc_headroom_bytes\": %llu, \"bytes\": %llu, \"max_bytes\": %llu, \"xoff\": %s}",
                first ? "" : ", ", q, (unsigned long long)d->pause_sent[q], (unsigned long long)d->xon_sent[q],
                (unsigned long long)d->c[q][PC_HEADROOM], (unsigned long long)d->hr_bytes[q],
                (unsigned long long)d->in_bytes[q], (unsigned long long)d->in_max[q], d->xoff_on[q] ? "true" : "false");
        first = 0;
    }
    fprintf(f, "}, \"egress\": {");
    first = 1;
    for (int q = 0; q < NPRIO; q++) {
        if (!lossless(q)) continue;
        double ps = eg_paused_time(d, now, q);
        fprintf(f, "%s\"%d\": {\"pause_received\": %llu, \"xon_received\": %llu, \"drop_pfc_watchdog\": %llu, "
                "\"paused_s\": %.9g, \"paused_real_s\": %.9g, \"ignored\": %llu, \"override\": %s}",
                first ? "" : ", ", q, (unsigned long long)d->pause_rx[q], (unsigned long long)d->xon_rx[q],
                (unsigned long long)d->c[q][PC_WATCHDOG], ps, ps / PF.scale, (unsigned long long)d->ignored[q],
                d->override[q] == 1 ? "\"drop\"" : d->override[q] == 2 ? "\"ignore\"" : "null");
        first = 0;
    }
    fprintf(f, "}, \"watchdog\": ");
    if (!PF.wd_action) {
        fprintf(f, "null");
    } else {
        fprintf(f, "{\"action\": \"%s\", \"detect_s\": %.9g, \"restore_s\": %.9g",
                PF.wd_action == 1 ? "drop" : "ignore", PF.wd_detect, PF.wd_restore);
        for (int q = 0; q < NPRIO; q++) {
            if (!lossless(q)) continue;
            fprintf(f, ", \"%d\": {\"storms\": %llu, \"restorations\": %llu, \"storm_s\": %.9g, \"in_storm\": %s}",
                    q, (unsigned long long)d->storms[q], (unsigned long long)d->restorations[q], d->storm_s[q],
                    d->in_storm[q] ? "true" : "false");
        }
        fprintf(f, "}");
    }
    fprintf(f, "}");
    if (with_series) {
        fprintf(f, ", \"pfc_series\": [");
        for (size_t i = 0; i < d->nsamples; i++)
            fprintf(f, "%s[%.6f, %u, %llu, %u]", i ? ", " : "", d->samples[i].t, d->samples[i].packets,
                    (unsigned long long)d->samples[i].bytes, d->samples[i].mask);
        fprintf(f, "], \"pfc_tx_events\": [");
        for (size_t i = 0; i < g_tx_nev[idx]; i++)
            fprintf(f, "%s[%.9f, %.9f, %d]", i ? ", " : "", g_tx_ev[idx][i].t0, g_tx_ev[idx][i].t1, g_tx_ev[idx][i].pause);
        fprintf(f, "], \"pfc_rx_events\": [");
        for (size_t i = 0; i < g_rx_nev[idx]; i++)
            fprintf(f, "%s[%.9f, %.9f, %d]", i ? ", " : "", g_rx_ev[idx][i].t0, g_rx_ev[idx][i].t1, g_rx_ev[idx][i].pause);
        fprintf(f, "]");
    }
}

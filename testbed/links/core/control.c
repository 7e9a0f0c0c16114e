/* control.c: runtime impairment of a running link (a gray failure); #included by linkcore.c.
 *
 * SIGUSR2 asks the forwarder to read the control file <stats>.ctl (testbed/links/control.py renders it):
 *
 *   seq N                                  the request's number, echoed as "control_seq" in the stats
 *   loss a>b|b>a|both none|random,RATE     that direction's loss from the next frame on
 *
 * All of a file is applied or none of it (a bad line leaves every direction as it was and says why in
 * "control_error"); counters are never reset, so each frame lost after the change is one more drop_loss.
 * The stats file is rewritten at once, which is the acknowledgement the glue waits for.
 */

static volatile sig_atomic_t g_ctl;
static unsigned long long g_ctl_seq;
static char g_ctl_error[200];
static void on_ctl(int s) { (void)s; g_ctl = 1; }

static void control_apply(params_t pd[2]) {
    char path[4096], line[256];
    snprintf(path, sizeof path, "%s.ctl", opt_stats);
    g_ctl_error[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(g_ctl_error, sizeof g_ctl_error, "cannot read the control file"); return; }
    unsigned long long seq = 0;
    int have_seq = 0;
    double rate[2] = {-1.0, -1.0};
    while (!g_ctl_error[0] && fgets(line, sizeof line, f)) {
        char dir[8], model[64], extra[2];
        double r = -1.0;
        if (sscanf(line, "seq %llu %1s", &seq, extra) == 1) { have_seq = 1; continue; }
        int n = sscanf(line, "loss %7s %63s %1s", dir, model, extra);
        if (n == 2) {
            if (strcmp(model, "none") == 0) r = 0.0;
            else if (strncmp(model, "random,", 7) == 0 && sscanf(model + 7, "%lf%1s", &r, extra) == 1
                     && r >= 0.0 && r <= 1.0) {}
            else { snprintf(g_ctl_error, sizeof g_ctl_error, "loss: none or random,RATE with RATE in 0..1"); break; }
            int ab = strcmp(dir, "a>b") == 0, ba = strcmp(dir, "b>a") == 0, both = strcmp(dir, "both") == 0;
            if (!ab && !ba && !both) { snprintf(g_ctl_error, sizeof g_ctl_error, "loss: direction a>b, b>a or both"); break; }
            if (ab || both) rate[0] = r;
            if (ba || both) rate[1] = r;
            continue;
        }
        if (sscanf(line, "%1s", extra) != 1) continue;  /* blank line */
        snprintf(g_ctl_error, sizeof g_ctl_error, "unknown control line (expected seq N or loss DIR MODEL)");
    }
    fclose(f);
    if (!g_ctl_error[0] && !have_seq) snprintf(g_ctl_error, sizeof g_ctl_error, "no seq line");
    g_ctl_seq = seq;
    if (g_ctl_error[0]) return;
    for (int d = 0; d < 2; d++) {
        if (rate[d] < 0) continue;
        pd[d].loss = rate[d] > 0 ? 1 : 0;
        pd[d].loss_rate = rate[d];
    }
}

/* The long-run loss probability of a direction now (Gilbert-Elliott: its mean). */
static double loss_now(const params_t *p) {
    if (p->loss == 1) return p->loss_rate;
    if (p->loss == 2) return p->ge_p + p->ge_r > 0 ? (p->ge_r * p->loss_good + p->ge_p * p->loss_bad) / (p->ge_p + p->ge_r) : 0;
    return 0.0;
}

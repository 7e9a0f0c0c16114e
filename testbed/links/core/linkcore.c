/* linkcore: the compiled data path of the userspace link node (testbed/links/core/__init__.py builds it).
 *
 * The same model as testbed/links/queue.py (the reference), in C, behind batched AF_PACKET I/O:
 *
 *   recvmmsg(a) -> admit(kernel arrival stamp) -> FIFO of (release, frame) --send--> b   (and b -> a)
 *      admit: tail drop at limit -> RED/ECN on the instantaneous queue (CE + IPv4 checksum)
 *             -> serialise at rate (virtual egress queue) -> loss (Bernoulli / Gilbert-Elliott)
 *             -> release = depart + delay + U(-jitter, +jitter), never before the previous release
 *
 * Each direction's releases are monotonic (a wire never reorders), so a FIFO per direction is the timer
 * queue and the next wake-up is the earliest head. The wait is a ppoll() until `spin` seconds before that
 * head, then a busy-wait that keeps polling the sockets; SCHED_FIFO and CPU pinning are options.
 * PFC (--pfc SPEC): the direction runs testbed/pfc/link.py's model instead, in pfc.c (per-priority FIFOs, a
 * serialiser that decides each start, PAUSE/XON to the upstream side, received PAUSE holds a priority).
 *
 * Randomness is CPython's: MT19937 seeded by init_by_array with the seed's 32-bit words, random() from
 * two draws (a>>5, b>>6), uniform(a, b) = a + (b-a)*random(). So `linkcore trace` gives the very decisions
 * of queue.Direction for the same seed, which the unit tests require.
 *
 * Modes:
 *   linkcore forward --a IF --b IF --stats FILE [model options] [--bare] ...   (root)
 *   linkcore trace [model options] --seed N  < "t hexframe" lines  > "fate release hexout" lines
 *   linkcore pfctrace --pfc SPEC [model options] --seed N   (pfc.c; the reference is testbed/pfc/link.py)
 *   linkcore gen --a IF --pps R --seconds S --size N [--tos T]   (the benchmark's traffic source: paced 64 B UDP
 *                frames by AF_PACKET sendmmsg, as iperf3 tops out near 50 kpps of small datagrams here)
 * Stats: the JSON document of testbed/links/delayline.py (same keys), rewritten atomically.
 * SIGUSR2: change a direction's loss at runtime (control.c; a gray failure).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

/* ---------------------------------------------------------------- CPython's Mersenne Twister */
typedef struct { uint32_t mt[624]; int mti; } mt_t;

static void mt_init(mt_t *r, uint32_t s) {
    r->mt[0] = s;
    for (int i = 1; i < 624; i++)
        r->mt[i] = 1812433253U * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = 624;
}

static void mt_init_by_array(mt_t *r, const uint32_t *key, size_t n) {
    size_t i = 1, j = 0, k = 624 > n ? 624 : n;
    mt_init(r, 19650218U);
    for (; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
        i++; j++;
        if (i >= 624) { r->mt[0] = r->mt[623]; i = 1; }
        if (j >= n) j = 0;
    }
    for (k = 623; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
        i++;
        if (i >= 624) { r->mt[0] = r->mt[623]; i = 1; }
    }
    r->mt[0] = 0x80000000U;
}

/* random.Random(seed) for an int seed: the 32-bit words of |seed|, least significant first. */
static void mt_seed(mt_t *r, unsigned long long seed) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mt_init_by_array(r, key, key[1] ? 2 : 1);
}

static uint32_t mt_u32(mt_t *r) {
    uint32_t y;
    if (r->mti >= 624) {
        int k;
        for (k = 0; k < 624 - 397; k++) {
            y = (r->mt[k] & 0x80000000U) | (r->mt[k + 1] & 0x7fffffffU);
            r->mt[k] = r->mt[k + 397] ^ (y >> 1) ^ ((y & 1U) ? 0x9908b0dfU : 0U);
        }
        for (; k < 623; k++) {
            y = (r->mt[k] & 0x80000000U) | (r->mt[k + 1] & 0x7fffffffU);
            r->mt[k] = r->mt[k + (397 - 624)] ^ (y >> 1) ^ ((y & 1U) ? 0x9908b0dfU : 0U);
        }
        y = (r->mt[623] & 0x80000000U) | (r->mt[0] & 0x7fffffffU);
        r->mt[623] = r->mt[396] ^ (y >> 1) ^ ((y & 1U) ? 0x9908b0dfU : 0U);
        r->mti = 0;
    }
    y = r->mt[r->mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

static double mt_random(mt_t *r) {
    uint32_t a = mt_u32(r) >> 5, b = mt_u32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------- ECN (testbed/links/ecn.py) */
enum { NOT_IP = -1, NOT_ECT = 0, ECT1 = 1, ECT0 = 2, CE = 3 };

static int l3(const uint8_t *f, size_t n, size_t *off) {
    size_t o = 12;
    while (n >= o + 2) {
        int et = (f[o] << 8) | f[o + 1];
        if (et == 0x8100 || et == 0x88A8) { o += 4; continue; }
        *off = o + 2;
        return et;
    }
    return 0;
}

static int ecn_codepoint(const uint8_t *f, size_t n) {
    size_t off = 0;
    int et = l3(f, n, &off);
    if (et == 0x0800 && n >= off + 20 && f[off] >> 4 == 4) return f[off + 1] & 3;
    if (et == 0x86DD && n >= off + 40 && f[off] >> 4 == 6) return (f[off + 1] >> 4) & 3;
    return NOT_IP;
}

/* Set CE; recompute the IPv4 header checksum. Returns 0, or -1 when the frame cannot be marked. */
static int set_ce(uint8_t *f, size_t n) {
    size_t off = 0;
    int et = l3(f, n, &off);
    if (et == 0x0800 && n >= off + 20 && f[off] >> 4 == 4) {
        size_t ihl = (size_t)(f[off] & 0x0F) * 4;
        if (ihl < 20 || n < off + ihl) return -1;
        f[off + 1] |= CE;
        f[off + 10] = f[off + 11] = 0;
        uint32_t sum = 0;
        for (size_t i = 0; i + 1 < ihl; i += 2) sum += (uint32_t)(f[off + i] << 8) | f[off + i + 1];
        while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
        sum = ~sum & 0xFFFF;
        f[off + 10] = (uint8_t)(sum >> 8);
        f[off + 11] = (uint8_t)sum;
        return 0;
    }
    if (et == 0x86DD && n >= off + 40 && f[off] >> 4 == 6) {
        f[off + 1] |= CE << 4;
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- the model (testbed/links/queue.py) */
typedef struct {
    double rate_Bps;            /* 0: unlimited (no queue, no RED) */
    double delay, jitter;
    double limit;               /* packets or bytes */
    int limit_bytes;
    int red; double kmin, kmax, pmax; int red_bytes, red_ecn;
    int loss;                   /* 0 none, 1 random, 2 gilbert-elliott */
    double loss_rate, ge_p, ge_r, loss_bad, loss_good;
    double sample_interval;
    size_t max_samples;
} params_t;

enum { F_FWD = 0, F_CE, F_ALREADY_CE, F_TAIL, F_RED, F_LOSS };
static const char *FATE[] = {"fwd", "ce", "already_ce", "tail", "red", "loss"};

#define NCOUNTERS 9
static const char *COUNTER_NAMES[NCOUNTERS] = {"rx_packets", "rx_bytes", "forwarded_packets", "forwarded_bytes",
    "drop_loss", "drop_red", "drop_tail", "ce_marked", "ecn_marks_already_ce"};
enum { C_RXP, C_RXB, C_FWP, C_FWB, C_LOSS, C_RED, C_TAIL, C_CE, C_ACE };

typedef struct { double depart; uint32_t len; } qent_t;
typedef struct { double t; uint32_t packets; uint64_t bytes; } sample_t;

typedef struct {
    const params_t *P;
    mt_t rng;
    int ge_bad;
    double busy_until, last_release;
    qent_t *q; size_t qhead, qlen, qcap;
    uint64_t qbytes;
    uint64_t c[NCOUNTERS];
    uint64_t max_qp, max_qb, samples_skipped;
    sample_t *samples; size_t nsamples, scap;
    double next_sample;
} model_t;

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) { fprintf(stderr, "linkcore: out of memory\n"); exit(3); }
    return q;
}

static void model_init(model_t *m, const params_t *P, unsigned long long seed) {
    memset(m, 0, sizeof *m);
    m->P = P;
    mt_seed(&m->rng, seed);
    m->qcap = 1024;
    m->q = xrealloc(NULL, m->qcap * sizeof *m->q);
}

static void q_push(model_t *m, double depart, uint32_t len) {
    if (m->qlen == m->qcap) {  /* grow and unwrap */
        size_t ncap = m->qcap * 2;
        qent_t *nq = xrealloc(NULL, ncap * sizeof *nq);
        for (size_t i = 0; i < m->qlen; i++) nq[i] = m->q[(m->qhead + i) % m->qcap];
        free(m->q);
        m->q = nq; m->qcap = ncap; m->qhead = 0;
    }
    m->q[(m->qhead + m->qlen) % m->qcap] = (qent_t){depart, len};
    m->qlen++;
}

static void drain(model_t *m, double now) {
    while (m->qlen && m->q[m->qhead].depart <= now) {
        m->qbytes -= m->q[m->qhead].len;
        m->qhead = (m->qhead + 1) % m->qcap;
        m->qlen--;
    }
}

static void sample(model_t *m, double now, uint64_t packets, uint64_t bytes) {
    m->next_sample = now + m->P->sample_interval;
    if (m->nsamples < m->P->max_samples) {
        if (m->nsamples == m->scap) {
            m->scap = m->scap ? m->scap * 2 : 4096;
            m->samples = xrealloc(m->samples, m->scap * sizeof *m->samples);
        }
        m->samples[m->nsamples++] = (sample_t){now, (uint32_t)packets, bytes};
    } else {
        m->samples_skipped++;
    }
}

static int lost(model_t *m) {
    const params_t *P = m->P;
    if (P->loss == 1) return mt_random(&m->rng) < P->loss_rate;
    if (m->ge_bad) {
        if (mt_random(&m->rng) < P->ge_r) m->ge_bad = 0;
    } else if (mt_random(&m->rng) < P->ge_p) {
        m->ge_bad = 1;
    }
    return mt_random(&m->rng) < (m->ge_bad ? P->loss_bad : P->loss_good);
}

static double red_probability(const params_t *P, double depth) {
    if (depth < P->kmin) return 0.0;
    if (depth > P->kmax) return 1.0;
    if (P->kmax == P->kmin) return P->pmax;
    return P->pmax * (depth - P->kmin) / (P->kmax - P->kmin);
}

/* Direction.admit: the fate of a frame arriving at `now`; *release is set for forwarded frames. */
static int admit(model_t *m, double now, uint8_t *frame, uint32_t length, double *release) {
    const params_t *P = m->P;
    uint64_t *c = m->c;
    int fate = F_FWD;
    double depart;
    c[C_RXP]++;
    c[C_RXB] += length;
    if (P->rate_Bps <= 0) {
        depart = now;
    } else {
        drain(m, now);
        uint64_t qlen = m->qlen, qbytes = m->qbytes;
        if (P->limit_bytes ? ((double)(qbytes + length) > P->limit) : ((double)(qlen + 1) > P->limit)) {
            c[C_TAIL]++;
            return F_TAIL;
        }
        if (P->red) {
            double p = red_probability(P, P->red_bytes ? (double)qbytes : (double)qlen);
            if (p > 0 && (p >= 1.0 || mt_random(&m->rng) < p)) {
                int code = P->red_ecn ? ecn_codepoint(frame, length) : NOT_ECT;
                if ((code == ECT0 || code == ECT1) && set_ce(frame, length) == 0) {
                    c[C_CE]++;
                    fate = F_CE;
                } else if (code == CE) {
                    c[C_ACE]++;
                    fate = F_ALREADY_CE;
                } else {
                    c[C_RED]++;
                    return F_RED;
                }
            }
        }
        double start = m->busy_until > now ? m->busy_until : now;
        depart = start + (double)length / P->rate_Bps;
        m->busy_until = depart;
        q_push(m, depart, length);
        m->qbytes = qbytes + length;
        if (qlen + 1 > m->max_qp) m->max_qp = qlen + 1;
        if (m->qbytes > m->max_qb) m->max_qb = m->qbytes;
        if (now >= m->next_sample) sample(m, now, qlen + 1, m->qbytes);
    }
    if (P->loss && lost(m)) {
        c[C_LOSS]++;
        return F_LOSS;
    }
    double rel = depart + P->delay;
    if (P->jitter > 0) {
        rel += -P->jitter + (P->jitter - -P->jitter) * mt_random(&m->rng);
        if (rel < depart) rel = depart;
    }
    if (rel < m->last_release) rel = m->last_release;
    m->last_release = rel;
    c[C_FWP]++;
    c[C_FWB] += length;
    *release = rel;
    return fate;
}

/* ---------------------------------------------------------------- options */
static params_t P = {.sample_interval = 1e-3, .max_samples = 200000, .limit = 1000};
static const char *opt_a, *opt_b, *opt_stats, *opt_params_json = "{}";
static unsigned long long opt_seed, opt_seed_ab, opt_seed_ba = 1;
static double opt_pps = 10000, opt_seconds = 1.0;
static int opt_size = 64, opt_tos;  /* gen: IPv4 TOS byte (DSCP << 2 | ECN) */
/* gen: frames sent together, each group when its last frame is due (1: evenly spaced). Groups let the source
 * sleep between them instead of busy-waiting every gap, so a backlog-making source costs little CPU */
static int opt_burst = 1;
static int opt_trace_ba = 0;   /* pfctrace: replay the b->a direction (its own thresholds) */
static double mono(void);
static int open_sock(const char *ifname);
static double opt_late_tol = 250e-6, opt_stats_interval = 1.0, opt_spin = 50e-6, opt_poll = 0.0;
/* a long wait ends this much before its deadline, then hops of WAKE_HOP_S (--wake-early; the PFC fixture
 * sleeps once to ~spin before each deadline instead: fewer vCPU wake-ups, less host steal, docs/pfc.md) */
static double WAKE_EARLY_S = 1e-3;
static int opt_rt = 10, opt_cpu = -1, opt_bare, opt_batch = 32, opt_rcvbuf = 8 << 20, opt_sndbuf = 8 << 20;

static void die(const char *what) { fprintf(stderr, "linkcore: %s\n", what); exit(2); }
static void parse_pfc(char *spec);  /* pfc.c */

static void parse_red(char *s) {
    char unit[16] = "";
    int ecn = 1;
    if (sscanf(s, "%lf,%lf,%lf,%15[a-z],%d", &P.kmin, &P.kmax, &P.pmax, unit, &ecn) != 5)
        die("--red: expected KMIN,KMAX,PMAX,bytes|packets,ECN(0|1)");
    P.red = 1; P.red_bytes = strcmp(unit, "bytes") == 0; P.red_ecn = ecn;
}

static void parse_loss(char *s) {
    if (strncmp(s, "random,", 7) == 0) {
        P.loss = 1;
        if (sscanf(s + 7, "%lf", &P.loss_rate) != 1) die("--loss random,RATE");
    } else if (strncmp(s, "ge,", 3) == 0) {
        P.loss = 2;
        if (sscanf(s + 3, "%lf,%lf,%lf,%lf", &P.ge_p, &P.ge_r, &P.loss_bad, &P.loss_good) != 4)
            die("--loss ge,P,R,LOSS_BAD,LOSS_GOOD");
    } else if (strcmp(s, "none") != 0) {
        die("--loss: none, random,RATE or ge,P,R,LOSS_BAD,LOSS_GOOD");
    }
}

static void parse_options(int argc, char **argv) {
    static struct option opts[] = {
        {"a", 1, 0, 'a'}, {"b", 1, 0, 'b'}, {"stats", 1, 0, 's'}, {"params-json", 1, 0, 'j'},
        {"rate-bps", 1, 0, 'R'}, {"delay", 1, 0, 'D'}, {"jitter", 1, 0, 'J'}, {"limit", 1, 0, 'L'},
        {"limit-unit", 1, 0, 'U'}, {"red", 1, 0, 'E'}, {"loss", 1, 0, 'X'}, {"seed", 1, 0, 'S'},
        {"seed-ab", 1, 0, '1'}, {"seed-ba", 1, 0, '2'}, {"late-tolerance", 1, 0, 'T'},
        {"stats-interval", 1, 0, 'I'}, {"spin", 1, 0, 'P'}, {"poll-window", 1, 0, 'W'}, {"rt-priority", 1, 0, 'r'}, {"cpu", 1, 0, 'c'},
        {"bare", 0, 0, 'B'}, {"batch", 1, 0, 'n'}, {"rcvbuf", 1, 0, 'v'}, {"sndbuf", 1, 0, 'w'},
        {"sample-interval", 1, 0, 'i'}, {"max-samples", 1, 0, 'm'}, {"pps", 1, 0, 'p'}, {"seconds", 1, 0, 'd'},
        {"size", 1, 0, 'z'}, {"pfc", 1, 0, 'F'}, {"tos", 1, 0, 'o'}, {"wake-early", 1, 0, 'K'},
        {"burst", 1, 0, 'u'}, {"trace-ba", 0, 0, 'y'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'a': opt_a = optarg; break;
        case 'b': opt_b = optarg; break;
        case 's': opt_stats = optarg; break;
        case 'j': opt_params_json = optarg; break;
        case 'R': P.rate_Bps = strtod(optarg, NULL) / 8.0; break;
        case 'D': P.delay = strtod(optarg, NULL); break;
        case 'J': P.jitter = strtod(optarg, NULL); break;
        case 'L': P.limit = strtod(optarg, NULL); break;
        case 'U': P.limit_bytes = strcmp(optarg, "bytes") == 0; break;
        case 'E': parse_red(optarg); break;
        case 'X': parse_loss(optarg); break;
        case 'S': opt_seed = strtoull(optarg, NULL, 10); break;
        case '1': opt_seed_ab = strtoull(optarg, NULL, 10); break;
        case '2': opt_seed_ba = strtoull(optarg, NULL, 10); break;
        case 'T': opt_late_tol = strtod(optarg, NULL); break;
        case 'I': opt_stats_interval = strtod(optarg, NULL); break;
        case 'P': opt_spin = strtod(optarg, NULL); break;
        case 'W': opt_poll = strtod(optarg, NULL); break;
        case 'r': opt_rt = atoi(optarg); break;
        case 'c': opt_cpu = atoi(optarg); break;
        case 'B': opt_bare = 1; break;
        case 'n': opt_batch = atoi(optarg); break;
        case 'v': opt_rcvbuf = atoi(optarg); break;
        case 'w': opt_sndbuf = atoi(optarg); break;
        case 'i': P.sample_interval = strtod(optarg, NULL); break;
        case 'm': P.max_samples = strtoull(optarg, NULL, 10); break;
        case 'p': opt_pps = strtod(optarg, NULL); break;
        case 'd': opt_seconds = strtod(optarg, NULL); break;
        case 'z': opt_size = atoi(optarg); break;
        case 'F': parse_pfc(optarg); break;
        case 'o': opt_tos = atoi(optarg) & 0xFF; break;
        case 'K': WAKE_EARLY_S = strtod(optarg, NULL); break;
        case 'u': opt_burst = atoi(optarg); break;
        case 'y': opt_trace_ba = 1; break;
        default: die("bad option (see testbed/links/core/__init__.py for the command line)");
        }
    }
    if (opt_batch < 1 || opt_batch > 256) die("--batch must be 1..256");
    if (opt_burst < 1 || opt_burst > 64) die("--burst must be 1..64");
}

/* ---------------------------------------------------------------- trace mode (no root) */
static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int run_trace(void) {
    model_t m;
    model_init(&m, &P, opt_seed);
    static char line[2 * 65536 + 64];
    static uint8_t frame[65536];
    while (fgets(line, sizeof line, stdin)) {
        char *end;
        double t = strtod(line, &end);
        while (*end == ' ') end++;
        uint32_t n = 0;
        for (; hexval(end[0]) >= 0 && hexval(end[1]) >= 0 && n < sizeof frame; end += 2)
            frame[n++] = (uint8_t)(hexval(end[0]) << 4 | hexval(end[1]));
        double rel = 0;
        int fate = admit(&m, t, frame, n, &rel);
        if (fate <= F_ALREADY_CE) printf("%s %.17g", FATE[fate], rel); else printf("%s -", FATE[fate]);
        if (fate == F_CE) {
            putchar(' ');
            for (uint32_t i = 0; i < n; i++) printf("%02x", frame[i]);
        }
        putchar('\n');
    }
    printf("counters");
    for (int i = 0; i < NCOUNTERS; i++) printf(" %s=%llu", COUNTER_NAMES[i], (unsigned long long)m.c[i]);
    printf(" max_queue_packets=%llu max_queue_bytes=%llu samples=%zu\n", (unsigned long long)m.max_qp,
           (unsigned long long)m.max_qb, m.nsamples);
    return 0;
}

/* ---------------------------------------------------------------- forward mode (root) */
#define LATE_BUCKETS 8
static const double LATE_BOUNDS[LATE_BUCKETS - 1] = {10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3};
static const char *LATE_LABELS[LATE_BUCKETS] = {"<10us", "10-20us", "20-50us", "50-100us", "100-200us",
                                               "200-500us", "500-1000us", ">=1000us"};
#define MAX_FRAME 65536
#define WAKE_HOP_S 100e-6
#define IDLE_WAIT_S 0.05
#define STATS_QUIET_S 3e-3

typedef struct { double release; uint8_t *buf; uint32_t len; } pend_t;

typedef struct {
    const char *name;
    int rx, tx;
    model_t m;
    pend_t *p; size_t head, n, cap;
    uint64_t tx_packets, tx_errors, rx_errors, late, rx_truncated, late_hist[LATE_BUCKETS], rx_hist[LATE_BUCKETS];
    double max_late, late_sum;
    struct pfcdir *pfc;  /* NULL unless --pfc (pfc.c) */
} path_t;

static volatile sig_atomic_t g_stop, g_dump;
static void on_stop(int s) { (void)s; g_stop = 1; }
static void on_dump(int s) { (void)s; g_dump = 1; }

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double realtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int open_sock(const char *ifname) {
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    if (fd < 0) { perror("linkcore: socket(AF_PACKET)"); exit(2); }
    int one = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0)
        die("kernel lacks PACKET_IGNORE_OUTGOING (needs Linux >= 4.20)");
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &opt_rcvbuf, sizeof opt_rcvbuf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &opt_rcvbuf, sizeof opt_rcvbuf);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &opt_sndbuf, sizeof opt_sndbuf) < 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &opt_sndbuf, sizeof opt_sndbuf);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    unsigned idx = if_nametoindex(ifname);
    if (!idx) { fprintf(stderr, "linkcore: no interface %s\n", ifname); exit(2); }
    struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)idx};
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("linkcore: bind"); exit(2); }
    struct packet_mreq mr = {.mr_ifindex = (int)idx, .mr_type = PACKET_MR_PROMISC};
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
    return fd;
}

static uint64_t kernel_drops(int fd) {
    struct tpacket_stats st;
    socklen_t len = sizeof st;
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) < 0) return 0;
    return st.tp_drops;
}

static void pend_push(path_t *p, double release, const uint8_t *frame, uint32_t len) {
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 4096;
        pend_t *np = xrealloc(NULL, ncap * sizeof *np);
        for (size_t i = 0; i < p->n; i++) np[i] = p->p[(p->head + i) % p->cap];
        free(p->p);
        p->p = np; p->cap = ncap; p->head = 0;
    }
    uint8_t *buf = xrealloc(NULL, len);
    memcpy(buf, frame, len);
    p->p[(p->head + p->n) % p->cap] = (pend_t){release, buf, len};
    p->n++;
}

static path_t paths[2];
static params_t PD[2];  /* each direction's parameters (forward mode): control.c changes their loss */
static const char *intf_names[2];
static uint64_t g_kernel_drops, g_wakeups;
static int g_realtime;
static double g_started;

#include "pfc.c"
#include "control.c"

static void write_stats(int with_series, int ready) {
    if (!opt_stats) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", opt_stats);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror("linkcore: stats"); return; }
    g_kernel_drops += kernel_drops(paths[0].rx) + kernel_drops(paths[1].rx);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    fprintf(f, "{\"ready\": %s, \"pid\": %d, \"core\": \"%s\", \"interfaces\": {\"a\": \"%s\", \"b\": \"%s\"}, "
            "\"params\": %s, \"late_tolerance_s\": %.9g, \"realtime\": %s, \"cpu\": %d, \"uptime_s\": %.3f, "
            "\"cpu_s\": %.6f, \"voluntary_switches\": %ld, \"involuntary_switches\": %ld, \"wakeups\": %llu, "
            "\"poll_window_s\": %.9g, \"control_seq\": %llu, \"control_error\": \"%s\", ",
            ready ? "true" : "false", getpid(), opt_bare ? "bare" : "c", intf_names[0], intf_names[1],
            opt_params_json, opt_late_tol, g_realtime ? "true" : "false", opt_cpu, mono() - g_started, cpu,
            ru.ru_nvcsw, ru.ru_nivcsw, (unsigned long long)g_wakeups, opt_poll, g_ctl_seq, g_ctl_error);
    fprintf(f, "\"emulator_late\": %llu, \"rx_kernel_drops\": %llu, \"directions\": {",
            (unsigned long long)(paths[0].late + paths[1].late), (unsigned long long)g_kernel_drops);
    for (int d = 0; d < 2; d++) {
        path_t *p = &paths[d];
        model_t *m = &p->m;
        pfc_sync(p);
        fprintf(f, "%s\"%s\": {\"loss_rate_now\": %.9g, ", d ? ", " : "", p->name, loss_now(m->P));
        for (int i = 0; i < NCOUNTERS; i++) fprintf(f, "\"%s\": %llu, ", COUNTER_NAMES[i], (unsigned long long)m->c[i]);
        fprintf(f, "\"max_queue_packets\": %llu, \"max_queue_bytes\": %llu, \"samples_skipped\": %llu, "
                "\"tx_packets\": %llu, \"tx_errors\": %llu, \"rx_errors\": %llu, \"rx_truncated\": %llu, \"emulator_late\": %llu, "
                "\"max_lateness_s\": %.9g, \"mean_late_lateness_s\": %.9g, \"in_flight\": %zu, \"lateness_histogram\": {",
                (unsigned long long)m->max_qp, (unsigned long long)m->max_qb, (unsigned long long)m->samples_skipped,
                (unsigned long long)p->tx_packets, (unsigned long long)p->tx_errors,
                (unsigned long long)p->rx_errors, (unsigned long long)p->rx_truncated, (unsigned long long)p->late, p->max_late,
                p->late ? p->late_sum / p->late : 0.0, p->n + pfc_waiting(p));
        for (int i = 0; i < LATE_BUCKETS; i++)
            fprintf(f, "%s\"%s\": %llu", i ? ", " : "", LATE_LABELS[i], (unsigned long long)p->late_hist[i]);
        fprintf(f, "}, \"rx_latency_histogram\": {");
        for (int i = 0; i < LATE_BUCKETS; i++)
            fprintf(f, "%s\"%s\": %llu", i ? ", " : "", LATE_LABELS[i], (unsigned long long)p->rx_hist[i]);
        fprintf(f, "}");
        if (with_series) {
            fprintf(f, ", \"queue_series\": [");
            for (size_t i = 0; i < m->nsamples; i++)
                fprintf(f, "%s[%.6f, %u, %llu]", i ? ", " : "", m->samples[i].t, m->samples[i].packets,
                        (unsigned long long)m->samples[i].bytes);
            fprintf(f, "]");
        }
        pfc_stats_json(f, p, with_series);
        fprintf(f, "}");
    }
    fprintf(f, "}}\n");
    if (fclose(f) != 0 || rename(tmp, opt_stats) != 0) perror("linkcore: stats");
}

static void account_late(path_t *p, double late) {
    int b = 0;
    while (b < LATE_BUCKETS - 1 && late >= LATE_BOUNDS[b]) b++;
    p->late_hist[b]++;
    if (late > opt_late_tol) {
        p->late++;
        p->late_sum += late;
        if (late > p->max_late) p->max_late = late;
    }
}

/* Send every frame of `p` whose release time has come; returns the next release or 0.
 * One send() a frame, not sendmmsg: a send into a veth runs the receiving side's stack (and whatever
 * softirq work is pending on this CPU) before it returns, so each frame's lateness must be taken when
 * its own send begins, as the Python line does; the syscall itself is not the cost (measured). */
static double release_due(path_t *p) {
    while (p->n) {
        pend_t *e = &p->p[p->head];
        double now = mono();
        if (e->release > now) return e->release;
        if (send(p->tx, e->buf, e->len, MSG_DONTWAIT) < 0) {
            p->tx_errors++;  /* ENOBUFS and the like: counted, the frame is gone (a ledger entry) */
        } else {
            p->tx_packets++;
            account_late(p, now - e->release);
        }
        free(e->buf);
        p->head = (p->head + 1) % p->cap;
        p->n--;
    }
    return 0;
}

static uint8_t *rxbuf[256];

static int receive(path_t *p, double now, double offset) {
    struct mmsghdr msgs[256];
    struct iovec iov[256];
    char ctl[256][64];
    int n = opt_batch;
    for (int i = 0; i < n; i++) {
        iov[i] = (struct iovec){rxbuf[i], MAX_FRAME};
        msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1, .msg_control = ctl[i],
                                                .msg_controllen = sizeof ctl[i]}};
    }
    int got = recvmmsg(p->rx, msgs, (unsigned)n, MSG_DONTWAIT | MSG_TRUNC, NULL);
    if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) p->rx_errors++;
        return 0;
    }
    for (int i = 0; i < got; i++) {
        uint32_t len = msgs[i].msg_len;
        if (len > MAX_FRAME || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC)) { p->rx_truncated++; continue; }
        double arrival = now;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm; cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                arrival = ts.tv_sec + ts.tv_nsec * 1e-9 - offset;
                if (arrival > now) arrival = now;
                int b = 0;  /* how long the kernel took to hand it to us */
                while (b < LATE_BUCKETS - 1 && now - arrival >= LATE_BOUNDS[b]) b++;
                p->rx_hist[b]++;
            }
        }
        if (pfc_on_frame(p, arrival, rxbuf[i], len)) continue;
        if (opt_bare) {
            p->m.c[C_RXP]++; p->m.c[C_RXB] += len; p->m.c[C_FWP]++; p->m.c[C_FWB] += len;
            pend_push(p, arrival, rxbuf[i], len);
            continue;
        }
        double rel;
        int fate = admit(&p->m, arrival, rxbuf[i], len, &rel);
        if (fate <= F_ALREADY_CE) pend_push(p, rel, rxbuf[i], len);
    }
    return got;
}

static int run_forward(void) {
    if (!opt_a || !opt_b || !opt_stats) die("forward needs --a, --b and --stats");
    intf_names[0] = opt_a; intf_names[1] = opt_b;
    int sa = open_sock(opt_a), sb = open_sock(opt_b);
    paths[0] = (path_t){.name = "a>b", .rx = sa, .tx = sb};
    paths[1] = (path_t){.name = "b>a", .rx = sb, .tx = sa};
    PD[0] = PD[1] = P;
    model_init(&paths[0].m, &PD[0], opt_seed_ab);
    model_init(&paths[1].m, &PD[1], opt_seed_ba);
    pfc_forward_init();
    for (int i = 0; i < opt_batch; i++) rxbuf[i] = xrealloc(NULL, MAX_FRAME);
    struct sigaction sa_stop = {.sa_handler = on_stop}, sa_dump = {.sa_handler = on_dump};
    sigaction(SIGTERM, &sa_stop, NULL);
    sigaction(SIGINT, &sa_stop, NULL);
    sigaction(SIGUSR1, &sa_dump, NULL);
    struct sigaction sa_ctl = {.sa_handler = on_ctl};
    sigaction(SIGUSR2, &sa_ctl, NULL);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    if (opt_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(opt_cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) perror("linkcore: --cpu");
    }
    if (opt_rt > 0) {
        struct sched_param sp = {.sched_priority = opt_rt};
        g_realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    }
    g_started = mono();
    write_stats(0, 1);
    struct pollfd fds[2] = {{.fd = sa, .events = POLLIN}, {.fd = sb, .events = POLLIN}};
    double next_stats = mono() + opt_stats_interval, last_rx = -1.0;
    while (!g_stop) {
        double pfc0 = pfc_service(&paths[0]), pfc1 = pfc_service(&paths[1]);
        double next0 = release_due(&paths[0]), next1 = release_due(&paths[1]);
        double now = mono(), wait = IDLE_WAIT_S;
        if (pfc0 > 0 && pfc0 - now < wait) wait = pfc0 - now;
        if (pfc1 > 0 && pfc1 - now < wait) wait = pfc1 - now;
        if (next0 > 0 && next0 - now < wait) wait = next0 - now;
        if (next1 > 0 && next1 - now < wait) wait = next1 - now;
        if (now >= next_stats && (wait > STATS_QUIET_S || now >= next_stats + 4 * opt_stats_interval)) {
            write_stats(0, 1);
            next_stats = now + opt_stats_interval;
        }
        if (g_dump) { g_dump = 0; write_stats(1, 1); }
        if (g_ctl) { g_ctl = 0; control_apply(PD); write_stats(0, 1); }
        int timeout_ns;
        if (now - last_rx < opt_poll) {
            /* frames came within the poll window: read on without sleeping, since waking a halted
             * (virtual) CPU costs hundreds of microseconds here and that is lateness */
            double offset = realtime() - now;
            if (receive(&paths[0], now, offset) + receive(&paths[1], now, offset) > 0) last_rx = now;
            continue;
        }
        if (wait <= opt_spin) {
            timeout_ns = 0;  /* release imminent: spin, polling the sockets only */
        } else {
            double w = wait > WAKE_EARLY_S + WAKE_HOP_S ? wait - WAKE_EARLY_S
                       : (wait - opt_spin < WAKE_HOP_S ? wait - opt_spin : WAKE_HOP_S);
            timeout_ns = (int)(w * 1e9);
        }
        struct timespec ts = {timeout_ns / 1000000000, timeout_ns % 1000000000};
        int r = ppoll(fds, 2, &ts, NULL);
        if (r <= 0) continue;
        now = mono();
        double offset = realtime() - now;
        g_wakeups++;
        int got = 0;
        /* POLLERR too: the failing read takes the socket error (an interface going down) off the socket,
         * else ppoll would report it at once forever and the line would spin */
        if (fds[0].revents & (POLLIN | POLLERR)) got += receive(&paths[0], now, offset);
        if (fds[1].revents & (POLLIN | POLLERR)) got += receive(&paths[1], now, offset);
        if (got > 0) last_rx = now;
    }
    write_stats(1, 1);
    return 0;
}

/* ---------------------------------------------------------------- gen mode (benchmark source, root) */
static int run_gen(void) {
    if (!opt_a) die("gen needs --a IF");
    int fd = open_sock(opt_a);
    uint8_t f[1514] = {0};
    int flen = opt_size < 60 ? 60 : (opt_size > 1514 ? 1514 : opt_size);
    /* 02:77:00:00:00:01 -> 02:77:00:00:00:fe, 10.77.0.1 -> 10.77.0.2 udp 9: the link node forwards every
     * frame (its ports are promiscuous), host B drops it on arrival as not its MAC, so the sink costs little */
    memcpy(f, "\x02\x77\x00\x00\x00\xfe\x02\x77\x00\x00\x00\x01\x08\x00", 14);
    uint8_t *ip = f + 14;
    int iplen = flen - 14;
    ip[0] = 0x45; ip[1] = (uint8_t)opt_tos; ip[2] = (uint8_t)(iplen >> 8); ip[3] = (uint8_t)iplen; ip[8] = 64; ip[9] = 17;
    memcpy(ip + 12, "\x0a\x4d\x00\x01\x0a\x4d\x00\x02", 8);
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += (uint32_t)(ip[i] << 8) | ip[i + 1];
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    sum = ~sum & 0xFFFF;
    ip[10] = (uint8_t)(sum >> 8); ip[11] = (uint8_t)sum;
    uint8_t *udp = ip + 20;
    udp[0] = 0x13; udp[1] = 0x89; udp[3] = 9; udp[4] = (uint8_t)((iplen - 20) >> 8); udp[5] = (uint8_t)(iplen - 20);
    struct mmsghdr msgs[64];
    struct iovec iov = {f, (size_t)flen};
    for (int i = 0; i < 64; i++) msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov, .msg_iovlen = 1}};
    uint64_t sent = 0, errors = 0, total = (uint64_t)(opt_pps * opt_seconds);
    double start = mono();
    for (;;) {
        double now = mono();
        if (sent + errors >= total || now - start >= opt_seconds) break;
        uint64_t due = (uint64_t)((now - start) * opt_pps) + 1;
        if (due > total) due = total;
        if (due < sent + errors + (uint64_t)opt_burst && due < total) {
            /* the next group is not due yet: sleep through long waits, busy-wait through short ones */
            uint64_t last = sent + errors + (uint64_t)opt_burst;
            double gap = (double)(last < total ? last : total) / opt_pps - (now - start);
            if (gap > 200e-6) {
                struct timespec ts = {0, (long)((gap - 100e-6) * 1e9)};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        uint64_t k = due - sent - errors, most = opt_burst > 8 ? (uint64_t)opt_burst : 8;
        if (k > most) k = most;
        int r = sendmmsg(fd, msgs, (unsigned)k, 0);
        if (r < 0) errors++; else sent += (uint64_t)r;
    }
    printf("{\"sent\": %llu, \"errors\": %llu, \"seconds\": %.6f}\n", (unsigned long long)sent,
           (unsigned long long)errors, mono() - start);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) die("usage: linkcore forward|trace [options]");
    const char *mode = argv[1];
    parse_options(argc - 1, argv + 1);
    if (strcmp(mode, "trace") == 0) return run_trace();
    if (strcmp(mode, "pfctrace") == 0) return run_pfctrace();
    if (strcmp(mode, "forward") == 0) return run_forward();
    if (strcmp(mode, "gen") == 0) return run_gen();
    die("usage: linkcore forward|trace|gen [options]");
    return 2;
}

/* LD_PRELOAD shim for BMv2's receive path: a sized capture ring per port, and its drop counters.
 *
 * BMv2 (bmi) reads each port through libpcap with libpcap's default ring (2 MiB) and never reads the
 * ring's statistics, so frames the kernel could not put into a full ring vanish without a count anywhere
 * (the kernel counts them only in PACKET_STATISTICS of that socket, which no other process can read).
 * Preloaded into simple_switch only:
 *
 *   pcap_create(dev)    remembered per handle (the port's interface name)
 *   pcap_activate(p)    pcap_set_buffer_size(p, $TESTBED_BMV2_RX_BUFFER) first, when set
 *   setsockopt(...)     PACKET_RX_RING requests seen during an activate: the ring's frame slots, which
 *                       libpcap sizes for 64 KiB super-frames when the port has TSO/GSO on (then a 16 MiB
 *                       ring holds 256 frames, not ~10000): the "frames" field says what the ring holds
 *   a thread            every 100 ms writes $TESTBED_BMV2_RX_STATS (when set), atomically (tmp + rename):
 *                       {"buffer_bytes": N, "ports": {"s1-eth1": {"recv": R, "drop": D, "ifdrop": I, "frames": F}, ...}}
 *                       from pcap_stats (cumulative since the port opened; drop = the ring's tp_drops)
 *   pcap_activate(p)    then pcap_setnonblock(p, 1): bmi reads a port only after select() said its fd is
 *                       readable, so a read never needs to block -- but a port taken down makes the fd
 *                       readable (the socket's ENETDOWN) and libpcap's blocking read then keeps polling
 *                       that one port until a frame arrives on it: BMv2's single receive thread, and so
 *                       every port of the switch, stopped until then (measured: a switch whose own port
 *                       went down and up forwarded nothing until a frame was injected on that port).
 *                       Non-blocking, the read returns "no packet" (bmi skips it) and the others go on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_PORTS 64

/* libpcap's API (declared here: Debian ships its header only in libpcap-dev); resolved in simple_switch */
typedef struct pcap pcap_t;
struct pcap_stat { unsigned int ps_recv, ps_drop, ps_ifdrop; };
int pcap_stats(pcap_t *, struct pcap_stat *);
int pcap_set_buffer_size(pcap_t *, int);
int pcap_setnonblock(pcap_t *, int, char *);

static struct { pcap_t *p; char dev[64]; unsigned frames; } ports[MAX_PORTS];
static unsigned ring_frames;   /* tp_frame_nr of the last PACKET_RX_RING request (activates run one at a time) */
static int nports;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static long buffer_bytes;

static void *writer(void *arg)
{
    const char *path = arg;
    char tmp[4096];
    struct timespec ts = {0, 100 * 1000 * 1000};
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    for (;;) {
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "{\"buffer_bytes\": %ld, \"ports\": {", buffer_bytes);
            pthread_mutex_lock(&lock);
            for (int i = 0; i < nports; i++) {
                struct pcap_stat st;
                memset(&st, 0, sizeof st);
                if (pcap_stats(ports[i].p, &st) != 0) continue;
                fprintf(f, "%s\"%s\": {\"recv\": %u, \"drop\": %u, \"ifdrop\": %u, \"frames\": %u}", i ? ", " : "",
                        ports[i].dev, st.ps_recv, st.ps_drop, st.ps_ifdrop, ports[i].frames);
            }
            pthread_mutex_unlock(&lock);
            fprintf(f, "}}\n");
            if (fclose(f) == 0) rename(tmp, path);
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void start_writer(void)
{
    const char *path = getenv("TESTBED_BMV2_RX_STATS");
    pthread_t t;
    if (path && *path && pthread_create(&t, NULL, writer, strdup(path)) == 0) pthread_detach(t);
}

pcap_t *pcap_create(const char *dev, char *errbuf)
{
    static pcap_t *(*real)(const char *, char *);
    if (!real) real = (pcap_t *(*)(const char *, char *))dlsym(RTLD_NEXT, "pcap_create");
    pcap_t *p = real(dev, errbuf);
    if (p && dev) {
        pthread_mutex_lock(&lock);
        if (nports < MAX_PORTS) {
            ports[nports].p = p;
            snprintf(ports[nports].dev, sizeof ports[nports].dev, "%s", dev);
            nports++;
        }
        pthread_mutex_unlock(&lock);
    }
    return p;
}

int pcap_activate(pcap_t *p)
{
    static int (*real)(pcap_t *);
    const char *size = getenv("TESTBED_BMV2_RX_BUFFER");
    if (!real) real = (int (*)(pcap_t *))dlsym(RTLD_NEXT, "pcap_activate");
    if (size && *size && atol(size) > 0) {
        buffer_bytes = atol(size);
        pcap_set_buffer_size(p, (int)buffer_bytes);
    }
    ring_frames = 0;
    int rc = real(p);
    if (rc >= 0) {
        char errbuf[256 + 1];  /* PCAP_ERRBUF_SIZE */
        pcap_setnonblock(p, 1, errbuf);
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nports; i++)
        if (ports[i].p == p) ports[i].frames = ring_frames;
    pthread_mutex_unlock(&lock);
    pthread_once(&once, start_writer);
    return rc;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    static int (*real)(int, int, int, const void *, socklen_t);
    if (!real) real = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
    int rc = real(fd, level, name, val, len);
    /* SOL_PACKET, PACKET_RX_RING: struct tpacket_req{,3} starts block_size, block_nr, frame_size, frame_nr */
    if (rc == 0 && level == 263 && name == 5 && val && len >= 16) ring_frames = ((const unsigned *)val)[3];
    return rc;
}

/* LD_PRELOAD shim: a TCP socket that binds to the wildcard address binds to loopback instead.
 *
 * BMv2's simple_switch has no option for the address of its Thrift server and listens on every
 * interface; the testbed promises that nothing it starts listens beyond loopback. Preloaded into
 * simple_switch only. Packet sockets, UDP and explicit addresses are left alone. An AF_INET6 socket
 * that also accepts IPv4 (IPV6_V6ONLY off, as Thrift sets it) gets ::ffff:127.0.0.1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real_bind;
    int type = 0;
    socklen_t tlen = sizeof type;

    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (!addr || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
        return real_bind(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        int v6only = 0;
        socklen_t vlen = sizeof v6only;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vlen);
            if (v6only) {
                a.sin6_addr = in6addr_loopback;
            } else {
                memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
                a.sin6_addr.s6_addr[10] = 0xff;
                a.sin6_addr.s6_addr[11] = 0xff;
                a.sin6_addr.s6_addr[12] = 127;
                a.sin6_addr.s6_addr[15] = 1;
            }
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_bind(fd, addr, len);
}

/* The network client (and bulk server) of scripts/bench: what the --net filtered
 * proxy costs, timed inside one process so that no process start is in the figures.
 *
 *   net conn N HOST PORT [PROXY_PORT]     N sequential TLS connections (TCP connect, CONNECT
 *                                         when PROXY_PORT is given, TLS handshake, GET, read
 *                                         to EOF); prints conn_us=MEDIAN p10_us= p90_us=
 *                                         (conn and tls-bulk send a Host header, and
 *                                         "x-api-key: VALUE" when BENCH_API_KEY is set:
 *                                         inside, the placeholder of a --secret)
 *   net bulk BYTES HOST PORT [PROXY_PORT] one TCP stream of BYTES from the bulk server (through
 *                                         a CONNECT tunnel when PROXY_PORT is given); prints
 *                                         bytes= seconds= mib_s= cpu_s=
 *   net tls-bulk BYTES PATH HOST PORT [PROXY_PORT]
 *                                         one HTTPS download: TLS handshake, GET PATH, read to
 *                                         EOF (at least BYTES); prints bytes= seconds= mib_s=
 *                                         cpu_s= (this process's user+system time)
 *   net fwd PORT_FILE TARGET_PORT         the floor of a relay: a plain loopback forwarder on
 *                                         127.0.0.1 (a random port, written to PORT_FILE) to
 *                                         TARGET_PORT, splice(2) through a 1 MiB pipe per
 *                                         direction, one process per connection, one thread
 *                                         per direction; after each connection appends
 *                                         "cpu_s=" (its user+system time) to PORT_FILE.cpu
 *   net hold N BYTES SECONDS HOST PORT PROXY_PORT
 *                                         N tunnels at once, each reading BYTES, then all held
 *                                         open SECONDS; prints open=N
 *   net serve-bulk PORT_FILE              the bulk server on 127.0.0.1 (a random port, written
 *                                         to PORT_FILE): reads "BYTES\n", sends that many
 *                                         bytes, closes; one process per connection, which
 *                                         appends "cpu_s=" to PORT_FILE.cpu when done
 *   net serve-tls PORT_FILE CERT KEY      the same over TLS, as an HTTPS server: answers
 *                                         "GET /BYTES" with a 200 head and BYTES bytes, in
 *                                         TLS records of 16 KiB (SSL_write of 256 KiB)
 *
 * Every failure is one line on stderr and exit 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "net: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* User + system CPU seconds of this process so far. */
static double cpu_self(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static int dial(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static void write_all(int fd, const char *b, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write");
    b += w;
    n -= (size_t)w;
  }
}

/* A connection to HOST:PORT, through a CONNECT tunnel of the proxy when proxy > 0. */
static int open_to(const char *host, int port, int proxy) {
  if (proxy <= 0) return dial(port);
  int fd = dial(proxy);
  char req[512];
  int n = snprintf(req, sizeof req, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port,
                   host, port);
  write_all(fd, req, (size_t)n);
  /* Byte by byte up to the end of the answer's head: nothing of the tunnel is read here. */
  char head[1024];
  size_t len = 0;
  while (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0) {
    if (len == sizeof head) { errno = 0; die("CONNECT answer too long"); }
    ssize_t r = read(fd, head + len, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("reading the CONNECT answer");
    len += (size_t)r;
  }
  if (len < 12 || memcmp(head + 9, "200", 3) != 0) {
    errno = 0;
    head[len < 200 ? len : 200] = 0;
    fprintf(stderr, "net: the proxy refused: %s\n", head);
    exit(1);
  }
  return fd;
}

/* The head of a GET: a Host header, and when BENCH_API_KEY is set a header "x-api-key: <its
 * value>" (inside a sandbox run with --secret BENCH_API_KEY=..., the placeholder, which the
 * proxy replaces: every request is then an injected one). */
static int request(char *out, size_t cap, const char *path, const char *host, int port) {
  const char *key = getenv("BENCH_API_KEY");
  int n = snprintf(out, cap, "GET %s HTTP/1.0\r\nHost: %s:%d\r\n%s%s%s\r\n", path, host, port,
                   key ? "x-api-key: " : "", key ? key : "", key ? "\r\n" : "");
  if (n < 0 || (size_t)n >= cap) { errno = 0; die("request head too long"); }
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int conn(int n, const char *host, int port, int proxy) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) die("SSL_CTX_new");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  /* A new handshake each time, as a new process would do. */
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  double *t = calloc((size_t)n, sizeof *t);
  if (!t) die("calloc");
  char buf[4096], get[1024];
  int gl = request(get, sizeof get, "/", host, port);
  for (int i = 0; i < n; i++) {
    double t0 = now();
    int fd = open_to(host, port, proxy);
    SSL *s = SSL_new(ctx);
    SSL_set_fd(s, fd);
    if (SSL_connect(s) != 1) { errno = 0; ERR_print_errors_fp(stderr); die("TLS handshake"); }
    if (SSL_write(s, get, gl) <= 0) { errno = 0; die("SSL_write"); }
    size_t got = 0;
    int r;
    while ((r = SSL_read(s, buf, sizeof buf)) > 0) got += (size_t)r;
    if (got == 0) { errno = 0; die("no answer from the TLS server"); }
    SSL_free(s);
    close(fd);
    t[i] = (now() - t0) * 1e6;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  printf("conn_us=%.0f p10_us=%.0f p90_us=%.0f n=%d\n", t[n / 2], t[n / 10], t[n * 9 / 10], n);
  return 0;
}

static int bulk(long long bytes, const char *host, int port, int proxy) {
  static char buf[1 << 18];
  double t0 = now();
  int fd = open_to(host, port, proxy);
  char req[64];
  int n = snprintf(req, sizeof req, "%lld\n", bytes);
  write_all(fd, req, (size_t)n);
  long long got = 0;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("read");
    if (r == 0) break;
    got += r;
  }
  double s = now() - t0;
  if (got != bytes) { errno = 0; fprintf(stderr, "net: got %lld of %lld bytes\n", got, bytes); exit(1); }
  printf("bytes=%lld seconds=%.4f mib_s=%.1f cpu_s=%.4f\n", got, s, got / s / 1048576.0, cpu_self());
  return 0;
}

static int tls_bulk(long long bytes, const char *path, const char *host, int port, int proxy) {
  static char buf[1 << 16];
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) die("SSL_CTX_new");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
  double t0 = now();
  int fd = open_to(host, port, proxy);
  SSL *s = SSL_new(ctx);
  SSL_set_fd(s, fd);
  if (SSL_connect(s) != 1) { errno = 0; ERR_print_errors_fp(stderr); die("TLS handshake"); }
  char get[1024];
  int n = request(get, sizeof get, path, host, port);
  if (SSL_write(s, get, n) <= 0) { errno = 0; die("SSL_write"); }
  long long got = 0;
  int r;
  while ((r = SSL_read(s, buf, sizeof buf)) > 0) got += r;
  double secs = now() - t0;
  if (got < bytes) { errno = 0; fprintf(stderr, "net: got %lld of %lld bytes\n", got, bytes); exit(1); }
  printf("bytes=%lld seconds=%.4f mib_s=%.1f cpu_s=%.4f\n", got, secs, got / secs / 1048576.0,
         cpu_self());
  return 0;
}

/* A listening socket on a random port of 127.0.0.1, written to PORT_FILE. */
static int listen_any(const char *port_file) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 256) != 0 ||
      getsockname(l, (struct sockaddr *)&a, &al) != 0)
    die("listen");
  FILE *f = fopen(port_file, "w");
  if (!f) die(port_file);
  fprintf(f, "%d\n", ntohs(a.sin_port));
  fclose(f);
  signal(SIGCHLD, SIG_IGN);
  return l;
}

/* "cpu_s=" of this process, one line appended to PORT_FILE.cpu. */
static void append_cpu(const char *port_file) {
  char name[4096];
  snprintf(name, sizeof name, "%s.cpu", port_file);
  FILE *o = fopen(name, "a");
  if (o) {
    fprintf(o, "cpu_s=%.4f\n", cpu_self());
    fclose(o);
  }
}

/* One direction of the forwarder: splice until end-of-file, then half-close. */
struct leg { int from, to; };
static void *fwd_leg(void *arg) {
  struct leg *l = arg;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) die("pipe2");
  fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
  for (;;) {
    ssize_t n = splice(l->from, NULL, p[1], NULL, 1 << 20, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    while (n > 0) {
      ssize_t m = splice(p[0], NULL, l->to, NULL, (size_t)n, SPLICE_F_MOVE);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) _exit(1);
      n -= m;
    }
  }
  shutdown(l->to, SHUT_WR);
  return NULL;
}

static int fwd(const char *port_file, int target) {
  int l = listen_any(port_file);
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    if (fork() == 0) {
      int one = 1;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int u = dial(target);
      struct leg up = {c, u}, down = {u, c};
      pthread_t t;
      if (pthread_create(&t, NULL, fwd_leg, &up) != 0) _exit(1);
      fwd_leg(&down);
      pthread_join(t, NULL);
      append_cpu(port_file);
      _exit(0);
    }
    close(c);
  }
}

static int serve_tls(const char *port_file, const char *cert, const char *key) {
  static char buf[1 << 18];
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx || SSL_CTX_use_certificate_file(ctx, cert, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
    errno = 0;
    ERR_print_errors_fp(stderr);
    die("the TLS server's certificate");
  }
  int l = listen_any(port_file);
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    if (fork() == 0) {
      int one = 1;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      SSL *s = SSL_new(ctx);
      SSL_set_fd(s, c);
      if (SSL_accept(s) != 1) _exit(1);
      char req[1024];
      int len = 0, r;
      while (len < (int)sizeof req - 1 &&
             (r = SSL_read(s, req + len, (int)sizeof req - 1 - len)) > 0) {
        len += r;
        req[len] = 0;
        if (strstr(req, "\r\n\r\n")) break;
      }
      req[len] = 0;
      long long n = strncmp(req, "GET /", 5) == 0 ? atoll(req + 5) : 0;
      char head[128];
      int hl = snprintf(head, sizeof head,
                        "HTTP/1.0 200 OK\r\nContent-Length: %lld\r\nConnection: close\r\n\r\n", n);
      if (SSL_write(s, head, hl) <= 0) _exit(1);
      while (n > 0) {
        int w = SSL_write(s, buf, n < (long long)sizeof buf ? (int)n : (int)sizeof buf);
        if (w <= 0) _exit(1);
        n -= w;
      }
      SSL_shutdown(s);
      shutdown(c, SHUT_WR);
      while (read(c, req, sizeof req) > 0) {}
      append_cpu(port_file);
      _exit(0);
    }
    close(c);
  }
}

static int hold(int n, long long bytes, double seconds, const char *host, int port, int proxy) {
  static char buf[1 << 16];
  struct pollfd *p = calloc((size_t)n, sizeof *p);
  long long *left = calloc((size_t)n, sizeof *left);
  if (!p || !left) die("calloc");
  char req[64];
  int rl = snprintf(req, sizeof req, "%lld\n", bytes);
  for (int i = 0; i < n; i++) {
    p[i].fd = open_to(host, port, proxy);
    p[i].events = POLLIN;
    left[i] = bytes;
    write_all(p[i].fd, req, (size_t)rl);
  }
  int busy = n;
  while (busy > 0) {
    if (poll(p, (nfds_t)n, 30000) <= 0) die("poll (a tunnel stalled)");
    for (int i = 0; i < n; i++) {
      if (p[i].fd < 0 || !p[i].revents) continue;
      ssize_t r = read(p[i].fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) die("read");
      left[i] -= r;
      if (r == 0) {
        if (left[i] != 0) { errno = 0; die("a tunnel ended early"); }
        p[i].fd = -p[i].fd - 1; /* poll skips negative fds; keep it open */
        busy--;
      }
    }
  }
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  nanosleep(&ts, NULL);
  printf("open=%d\n", n);
  return 0;
}

static int serve_bulk(const char *port_file) {
  static char buf[1 << 20];
  int l = listen_any(port_file);
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    if (fork() == 0) {
      char line[64];
      size_t len = 0;
      while (len < sizeof line - 1) {
        ssize_t r = read(c, line + len, 1);
        if (r <= 0 || line[len] == '\n') break;
        len++;
      }
      line[len] = 0;
      long long n = atoll(line);
      while (n > 0) {
        ssize_t w = write(c, buf, n < (long long)sizeof buf ? (size_t)n : sizeof buf);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(1);
        n -= w;
      }
      shutdown(c, SHUT_WR);
      /* wait for the client's close: the figure covers the whole transfer */
      while (read(c, line, sizeof line) > 0) {}
      append_cpu(port_file);
      _exit(0);
    }
    close(c);
  }
}

int main(int argc, char **argv) {
  const char *m = argc > 1 ? argv[1] : "";
  if (!strcmp(m, "conn") && (argc == 5 || argc == 6))
    return conn(atoi(argv[2]), argv[3], atoi(argv[4]), argc == 6 ? atoi(argv[5]) : 0);
  if (!strcmp(m, "bulk") && (argc == 5 || argc == 6))
    return bulk(atoll(argv[2]), argv[3], atoi(argv[4]), argc == 6 ? atoi(argv[5]) : 0);
  if (!strcmp(m, "tls-bulk") && (argc == 6 || argc == 7))
    return tls_bulk(atoll(argv[2]), argv[3], argv[4], atoi(argv[5]), argc == 7 ? atoi(argv[6]) : 0);
  if (!strcmp(m, "fwd") && argc == 4) return fwd(argv[2], atoi(argv[3]));
  if (!strcmp(m, "hold") && argc == 8)
    return hold(atoi(argv[2]), atoll(argv[3]), atof(argv[4]), argv[5], atoi(argv[6]),
                atoi(argv[7]));
  if (!strcmp(m, "serve-bulk") && argc == 3) return serve_bulk(argv[2]);
  if (!strcmp(m, "serve-tls") && argc == 5) return serve_tls(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: net conn|bulk|tls-bulk|fwd|hold|serve-bulk|serve-tls ... (see scripts/bench.d/net.c)\n");
  return 2;
}

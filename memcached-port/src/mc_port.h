/* mc_port.h — memcached, one thread per connection (loom-memcached on fibres,
 * memcached-tpc on kernel threads). The hooks memcached.c and thread.c call;
 * README.md beside patches/ explains the design.
 *
 * memcached.c includes this after memcached.h. From then on its libevent
 * calls on events (event_set, event_base_set, event_add, event_del and the
 * evtimer_* forms built on them) do nothing: a connection's wanted direction
 * is c->ev_flags, which memcached keeps itself, and the connection's own
 * thread waits for it (mc_port_conn_start); the main base's timers are
 * mc_port_main_loop's. thread.c keeps its worker bases for the notify pipe
 * only. */
#ifndef MC_PORT_H
#define MC_PORT_H

/* memcached.h (which has no include guard) must come first. */

/* Before memcached_thread_init: refuses what the port cannot run (message on
 * stderr, exit status 64 as memcached's other bad settings) and, under loom,
 * makes the processors -t asks for. storage: extstore's, or NULL. */
void mc_port_init(int nthreads, void *storage);

/* In place of conn_new's (and conn_worker_readd's) event_add: starts the
 * connection's thread, which waits for c->ev_flags on c->sfd and runs
 * handler (memcached's event_handler) as libevent would, until the
 * connection is closed or handed to another thread (watch, metadump).
 * 0, or -1 with a message if no thread could be made. */
int mc_port_conn_start(conn *c, void (*handler)(evutil_socket_t, short, void *));

/* In place of worker_libevent's event_base_loop: serves the worker's notify
 * pipe (new connections, pause, stop) under the worker's gate. */
void mc_port_worker_loop(LIBEVENT_THREAD *me);

/* In place of main's event loop: calls tick (clock_handler) every second
 * until *stop is set (by a signal handler or `shutdown`). */
void mc_port_main_loop(volatile int *stop, void (*tick)(evutil_socket_t, short, void *));

/* Nonzero: connection threads time themselves out (-o idle_timeout), so
 * memcached's conn_timeout thread is not started. */
int mc_port_conn_timeouts(void);

/* conn_close's trace point (trace.h: empty without DTrace) runs before
 * close(2) frees the number: it tells the connection's own thread that its
 * connection is gone, which c->state cannot once accept reuses the number
 * and conn_new the conn struct. */
void mc_port_conn_release(int fd);
#undef MEMCACHED_CONN_RELEASE
#define MEMCACHED_CONN_RELEASE(fd) mc_port_conn_release(fd)

/* libevent's event calls, for memcached.c only: no-ops (see above). */
static inline void mc_port_event_set(struct event *ev, evutil_socket_t fd, short flags,
                                     void (*cb)(evutil_socket_t, short, void *), void *arg) {
    (void)ev; (void)fd; (void)flags; (void)cb; (void)arg;
}
static inline int mc_port_event_base_set(struct event_base *base, struct event *ev) {
    (void)base; (void)ev;
    return 0;
}
static inline int mc_port_event_add(struct event *ev, const struct timeval *tv) {
    (void)ev; (void)tv;
    return 0;
}
static inline int mc_port_event_del(struct event *ev) {
    (void)ev;
    return 0;
}
#define event_set mc_port_event_set
#define event_base_set mc_port_event_base_set
#define event_add mc_port_event_add
#define event_del mc_port_event_del

#endif

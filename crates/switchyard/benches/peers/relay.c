/* The floor of any process in the middle of a stdio MCP server: starts the server and copies
 * bytes both ways in one poll loop, with no parsing, no buffering beyond one read and no
 * threads. What a proxy pays beyond this is its own work per message.
 *
 * Built by the router bench (`cc -O2 relay.c -o relay`); usage: relay SERVER [ARG...]. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes all of buf to fd; 0 on success. */
static int write_all(int fd, const char *buf, ssize_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, (size_t)len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= n;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: relay SERVER [ARG...]\n");
        return 2;
    }
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) {
        perror("relay: pipe");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("relay: fork");
        return 1;
    }
    if (pid == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[0]);
        close(to_child[1]);
        close(from_child[0]);
        close(from_child[1]);
        execvp(argv[1], argv + 1);
        perror("relay: exec");
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    signal(SIGPIPE, SIG_IGN);

    /* fds[0]: the client (our stdin) -> the server; fds[1]: the server -> the client. */
    struct pollfd fds[2] = {{.fd = 0, .events = POLLIN}, {.fd = from_child[0], .events = POLLIN}};
    int outs[2] = {to_child[1], 1};
    static char buf[1 << 16];
    int open_count = 2;
    while (open_count > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0 || write_all(outs[i], buf, n)) {
                /* One side ended: pass the end on (the client's EOF is the MCP shutdown). */
                fds[i].fd = -1;
                close(outs[i]);
                open_count--;
            }
        }
        if (fds[1].fd < 0) break; /* the server is gone: nothing more can come */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

#include "serve/connection_watch.h"

#ifdef __linux__
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#endif

namespace moeflow::serve {

#ifdef __linux__
namespace {

// The numeric host and port of an address, as httplib writes them (getnameinfo).
bool host_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(s);
  return true;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                 int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0 || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage a{}, b{};
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&a), &la) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&b), &lb) != 0)
      continue;
    std::string lh, rh;
    int lp = 0, rp = 0;
    if (host_port(a, la, lh, lp) && host_port(b, lb, rh, rp) && lp == local_port && rp == remote_port &&
        lh == local_addr && rh == remote_addr) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  // Readable without a shutdown: a pipelined request's bytes, not a departure.
  return false;
}
#else
ConnectionWatch::ConnectionWatch(const std::string&, int, const std::string&, int) {}
bool ConnectionWatch::closed() const { return false; }
#endif

}  // namespace moeflow::serve

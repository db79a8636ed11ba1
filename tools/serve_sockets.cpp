#include "tools/serve_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <set>

namespace hearth::serve {

namespace {

struct Peer {
  std::string ip;
  int port = -1, local_port = -1;
};

bool peer_of(int fd, Peer& p) {
  sockaddr_storage peer{}, local{};
  socklen_t pl = sizeof peer, ll = sizeof local;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0)
    return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    p.port = ntohs(a->sin_port);
    p.local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&peer);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    p.port = ntohs(a->sin6_port);
    p.local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
  } else {
    return false;
  }
  p.ip = text;
  return true;
}

// Calls fn(fd, peer) for every connected socket of this process; fn returns false to stop.
void for_each_socket(const std::function<bool(int, const Peer&)>& fn) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    Peer p;
    if (*end || end == e->d_name || !peer_of(int(fd), p)) continue;
    if (!fn(int(fd), p)) break;
  }
  closedir(dir);
}

ino_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? st.st_ino : 0;
}

}  // namespace

int client_socket(const std::string& ip, int port, int local_port) {
  int found = -1;
  for_each_socket([&](int fd, const Peer& p) {
    if (p.port == port && p.local_port == local_port && p.ip == ip) found = fd;
    return found < 0;
  });
  return found;
}

bool peer_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

ConnectionReaper::ConnectionReaper(int local_port, std::chrono::seconds allowance)
    : port_(local_port), allowance_(allowance) {}

ino_t ConnectionReaper::started(int fd) {
  const ino_t ino = fd >= 0 ? inode_of(fd) : 0;
  if (!ino) return 0;
  std::lock_guard<std::mutex> lk(mu_);
  conns_[ino] = Conn{Clock::now(), true};
  return ino;
}

void ConnectionReaper::ended(ino_t connection) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = conns_.find(connection);
  if (it != conns_.end()) it->second = Conn{Clock::now(), false};
}

void ConnectionReaper::sweep() {
  const auto now = Clock::now();
  std::set<ino_t> open;
  std::lock_guard<std::mutex> lk(mu_);
  for_each_socket([&](int fd, const Peer& p) {
    if (p.local_port != port_) return true;
    const ino_t ino = inode_of(fd);
    if (!ino) return true;
    open.insert(ino);
    auto [it, fresh] = conns_.try_emplace(ino, Conn{now, false});
    if (!fresh && !it->second.running && now - it->second.since > allowance_) {
      shutdown(fd, SHUT_RDWR);  // the worker's read fails and it closes the connection
      conns_.erase(it);
      open.erase(ino);
    }
    return true;
  });
  for (auto it = conns_.begin(); it != conns_.end();)
    it = open.count(it->first) ? std::next(it) : conns_.erase(it);
}

}  // namespace hearth::serve

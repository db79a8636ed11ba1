// The client connections of `hearth serve`, seen from outside cpp-httplib (0.11 hands handlers no
// socket): which socket a request came on, whether its client has gone, and closing connections
// that take too long to send a request, which is how a client trickling a request head or body a
// byte at a time (slowloris) loses its worker thread instead of keeping it for ever.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace hearth::serve {

// The socket of the connection from ip:port to local_port, among this process's descriptors; -1
// if none. It stays open while the request's handler runs.
int client_socket(const std::string& ip, int port, int local_port);
// True once the client has closed its side: a peek reads end-of-stream (or the socket failed).
// Bytes waiting (a pipelined request) mean it is still there.
bool peer_closed(int fd);

class ConnectionReaper {
 public:
  // A connection gets `allowance` to send each request, counted from when it was first seen or
  // its last request ended.
  ConnectionReaper(int local_port, std::chrono::seconds allowance);
  // A request's handler starts on the connection of socket fd; returns the connection's key for
  // ended(), taken now because the descriptor may be reused by the time it ends.
  ino_t started(int fd);
  void ended(ino_t connection);
  // Shuts down connections past their allowance (cpp-httplib then closes them); every call also
  // forgets connections that have closed.
  void sweep();

 private:
  using Clock = std::chrono::steady_clock;
  struct Conn {
    Clock::time_point since;
    bool running = false;
  };
  int port_;
  std::chrono::seconds allowance_;
  std::mutex mu_;
  std::map<ino_t, Conn> conns_;  // by socket inode: descriptors are reused, inodes are not
};

}  // namespace hearth::serve

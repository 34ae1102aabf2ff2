// Whether the client of a request has gone away, for a handler that holds no socket.
// cpp-httplib 0.11 (Debian 12's) tells a handler nothing of its connection: a streamed
// response finds a closed one when a write fails, but a plain one is written only at the
// end, so a client that disconnects would keep its slot until max_tokens. The request's
// four addresses name its TCP connection; the watch finds the process's socket with
// them and polls it for the peer's shutdown.
#pragma once
#include <string>

namespace moeflow::serve {

class ConnectionWatch {
 public:
  // The addresses as the request gives them (numeric hosts, ports); a connection that
  // is not found (another platform, a test without a socket) is never reported closed.
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);
  bool found() const { return fd_ >= 0; }
  // True once the peer has shut down its side or the connection broke. A client that
  // half-closes after sending its request reads as gone too (none of the OpenAI
  // clients does).
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace moeflow::serve

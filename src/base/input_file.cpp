#include "base/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace moeflow {

void check_input_file(const std::string& path, const std::string& what) {
  const std::string named = what + " '" + path + "'";
  if (path.empty()) throw InputError(what + ": empty file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw InputError(named + (errno == ENOENT ? std::string(": no such file") : ": cannot be read: " + std::string(std::strerror(errno))));
  if (S_ISDIR(st.st_mode)) throw InputError(named + " is a folder, not a file");
  if (!S_ISREG(st.st_mode)) throw InputError(named + " is not a regular file (a device, FIFO or socket)");
}

std::ifstream open_input_file(const std::string& path, const std::string& what, bool binary) {
  check_input_file(path, what);
  std::ifstream in(path, binary ? std::ios::in | std::ios::binary : std::ios::in);
  if (!in) throw InputError(what + " '" + path + "' cannot be read: " + std::strerror(errno));
  return in;
}

}  // namespace moeflow

#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/error.h"

namespace moeflow {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string sys_error(int err) { return std::strerror(err); }

}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  const std::string who = what.empty() ? "'" + path + "'" : what + " '" + path + "'";
  if (path.empty()) throw InputError(what + ": empty output path");
  if (path.back() == '/') throw InputError(who + " names a folder, not a file");
  const std::string dir = folder_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw InputError(who + ": folder '" + dir + "' does not exist (" + sys_error(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw InputError(who + ": '" + dir + "' is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(who + ": cannot write in folder '" + dir + "' (" + sys_error(errno) + ")");
  // access() grants root everything, and some folders take no new files whatever the
  // permissions (/proc, a read-only mount): creating one is the only sure test, and
  // finds it now instead of after the work, under the temporary file's name.
  std::string probe = dir + "/.moeflow-probe-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw InputError(who + ": cannot create files in folder '" + dir + "' (" + sys_error(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      throw InputError(who + " is a symbolic link; moeflow replaces files, never what a link points to: give the real path");
    if (!S_ISREG(st.st_mode))
      throw InputError(who + " exists and is not a regular file (a folder, FIFO or device); refusing to replace it");
  } else if (errno != ENOENT) {
    throw InputError(who + ": " + sys_error(errno));
  }
}

AtomicFile::Buf::Buf(int fd) : fd_(fd), buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }

bool AtomicFile::Buf::drain() {
  const char* p = pbase();
  size_t n = static_cast<size_t>(pptr() - pbase());
  while (n > 0 && !failed_) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      failed_ = true;
      err_ = errno;
      break;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  setp(buf_.data(), buf_.data() + buf_.size());
  return !failed_;
}

int AtomicFile::Buf::sync() { return drain() ? 0 : -1; }

AtomicFile::Buf::int_type AtomicFile::Buf::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

std::streamsize AtomicFile::Buf::xsputn(const char* s, std::streamsize n) {
  std::streamsize done = 0;
  while (done < n) {
    if (pptr() == epptr() && !drain()) return done;
    const std::streamsize k = std::min<std::streamsize>(n - done, epptr() - pptr());
    std::memcpy(pptr(), s + done, static_cast<size_t>(k));
    pbump(static_cast<int>(k));
    done += k;
  }
  return done;
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  check_output_path(path, "");
  // A random suffix with O_EXCL: the open fails rather than follow or reuse anything
  // already at that name (O_NOFOLLOW as well, for clarity).
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".tmp.%08x%04x", rd(), rd() & 0xffff);
    tmp_ = path + suffix;
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST)
      throw InputError("cannot write '" + path + "' (its temporary '" + tmp_ + "': " + sys_error(errno) + ")");
  }
  if (fd_ < 0) throw InputError("cannot create a temporary next to '" + path + "'");
  // Replacing a file keeps its permission bits.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) ::fchmod(fd_, st.st_mode & 07777);
  buf_ = std::make_unique<Buf>(fd_);
  out_.rdbuf(buf_.get());
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

void AtomicFile::fail(const std::string& why) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  tmp_.clear();
  throw InputError("cannot write '" + path_ + "': " + why + " (the previous file, if any, is unchanged)");
}

void AtomicFile::commit() {
  if (committed_) return;
  out_.flush();
  if (!out_ || buf_->failed()) fail(buf_->err_ ? sys_error(buf_->err_) : "write failed");
  if (::fsync(fd_) != 0) fail("fsync: " + sys_error(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close: " + sys_error(errno));
  }
  fd_ = -1;
  // The target may have become a link or a FIFO since the constructor checked.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) fail("it is no longer a regular file");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename: " + sys_error(errno));
  committed_ = true;
  const int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // best effort: some file systems refuse fsync on a folder
    ::close(dir);
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace moeflow

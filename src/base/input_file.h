// Opening a file the user named (a trace, a profile, a text, a policy state). A folder
// or a device handed where a file belongs would otherwise fail deep inside a stream read
// (libstdc++ throws "basic_filebuf::underflow ... Is a directory") or never end
// (/dev/zero), so the path is checked first and the message says what it is.
#pragma once
#include <fstream>
#include <string>

namespace moeflow {

// Opens `path` for reading; `what` names it in errors ("trace", "--tasks file"). Throws
// InputError "<what> '<path>': no such file" / "is a folder, not a file" / "is not a
// regular file (a device, FIFO or socket)" / "cannot be read: <reason>".
std::ifstream open_input_file(const std::string& path, const std::string& what, bool binary = false);

// Throws the same errors without opening (for readers that open the file themselves).
void check_input_file(const std::string& path, const std::string& what);

}  // namespace moeflow

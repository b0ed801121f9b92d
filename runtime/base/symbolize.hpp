// base/symbolize.hpp — code addresses named for diagnostics.
//
// A stall report's stack used to be backtrace_symbols_fd's: mangled names
// (`_Z8hog_loopv+0xb`), and loom's own frames, hidden or static, as bare
// offsets into the library. Here a frame is named by the dynamic symbol
// dladdr finds or, failing that, the object file's own symbol table (.symtab,
// read once per file and kept), demangled: `hog_loop()+0xb (a.out)`;
// a blocked fibre's mutex, when it is a variable, by the variable's name.
// Not for signal handlers: it opens files and allocates.
#pragma once

#include <cstddef>

namespace loom::rt {

// Writes "name+0xoff (object)" for pc into out (always terminated); a pc
// that is a return address (every frame but an interrupted one) is looked
// up one byte back, inside the call.
void symbolize(const void* pc, bool return_address, char* out, std::size_t size);

// Names a variable of static storage that p points into ("big_lock",
// "table+0x40"), from the dynamic or the file's own symbol table; false for
// memory no symbol covers (the heap, stacks).
bool name_variable(const void* p, char* out, std::size_t size);

// Prints frames[first..n) to fd, one "  #k name+0xoff (object)" line each.
// frames[first] is taken as an interrupted pc when interrupted is true.
void print_frames(void* const* frames, int first, int n, bool interrupted, int fd);

}  // namespace loom::rt

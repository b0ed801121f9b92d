// base/symbolize.cpp — code addresses named for diagnostics (symbolize.hpp).
//
// dladdr names only what the dynamic symbol table exports; loom's library
// hides all but its API, and a program's static functions are never there.
// So an address dladdr cannot name is looked up in the object's own
// .symtab (present unless the file was stripped): the file mapped read-only
// once and kept for the process's life, its function symbols sorted by
// address. Names are demangled with the C++ runtime's __cxa_demangle.
#include "base/symbolize.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/spinlock.hpp"

namespace loom::rt {

namespace {

struct FunctionSymbol {
  std::uintptr_t lo, hi;  // link-time addresses
  const char* name;       // in the mapped file
};

struct ObjectSymbols {
  std::string path;
  std::vector<FunctionSymbol> functions;  // sorted by lo
  std::vector<FunctionSymbol> data;       // variables, sorted by lo
};

// The function symbols of an ELF file's .symtab (else .dynsym); empty when
// the file cannot be read or has neither.
void read_symbols(ObjectSymbols& o) {
  int fd = ::open(o.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st{};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && std::size_t(st.st_size) >= sizeof(Elf64_Ehdr))
    map = ::mmap(nullptr, std::size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return;
  const auto* base = static_cast<const unsigned char*>(map);
  const std::size_t size = std::size_t(st.st_size);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  auto inside = [&](std::uint64_t off, std::uint64_t len) { return off <= size && len <= size - off; };
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_shentsize != sizeof(Elf64_Shdr) || !inside(eh->e_shoff, std::uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr))) {
    ::munmap(map, size);
    return;
  }
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  const Elf64_Shdr* table = nullptr;
  for (int want : {SHT_SYMTAB, SHT_DYNSYM}) {
    for (unsigned i = 0; i < eh->e_shnum && !table; ++i)
      if (sh[i].sh_type == Elf64_Word(want) && sh[i].sh_link < eh->e_shnum) table = &sh[i];
    if (table) break;
  }
  if (!table || !inside(table->sh_offset, table->sh_size) ||
      !inside(sh[table->sh_link].sh_offset, sh[table->sh_link].sh_size)) {
    ::munmap(map, size);
    return;
  }
  const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + table->sh_offset);
  const char* names = reinterpret_cast<const char*>(base + sh[table->sh_link].sh_offset);
  const std::size_t names_size = sh[table->sh_link].sh_size;
  for (std::size_t i = 0; i < table->sh_size / sizeof(Elf64_Sym); ++i) {
    const Elf64_Sym& s = syms[i];
    const int type = ELF64_ST_TYPE(s.st_info);
    if ((type != STT_FUNC && type != STT_OBJECT) || s.st_shndx == SHN_UNDEF || s.st_size == 0) continue;
    if (s.st_name >= names_size || !std::memchr(names + s.st_name, 0, names_size - s.st_name)) continue;
    (type == STT_FUNC ? o.functions : o.data)
        .push_back({std::uintptr_t(s.st_value), std::uintptr_t(s.st_value + s.st_size), names + s.st_name});
  }
  if (o.functions.empty() && o.data.empty()) {
    ::munmap(map, size);
    return;
  }
  for (auto* v : {&o.functions, &o.data})
    std::sort(v->begin(), v->end(), [](const FunctionSymbol& a, const FunctionSymbol& b) { return a.lo < b.lo; });
}

SpinLock objects_lock;
std::vector<ObjectSymbols*>* objects = nullptr;  // never freed: its names point into kept maps

const FunctionSymbol* find_in_file(const std::string& path, std::uintptr_t at, bool data = false) {
  SpinGuard g(objects_lock);
  if (!objects) objects = new std::vector<ObjectSymbols*>;
  ObjectSymbols* o = nullptr;
  for (ObjectSymbols* each : *objects)
    if (each->path == path) o = each;
  if (!o) {
    o = new ObjectSymbols{path, {}, {}};
    read_symbols(*o);
    objects->push_back(o);
  }
  const std::vector<FunctionSymbol>& v = data ? o->data : o->functions;
  auto it = std::upper_bound(v.begin(), v.end(), at, [](std::uintptr_t a, const FunctionSymbol& f) { return a < f.lo; });
  if (it == v.begin()) return nullptr;
  --it;
  return at < it->hi ? &*it : nullptr;
}

// A C++ symbol's demangled name (malloc'd), or null: only names mangled
// as C++'s (_Z...) — __cxa_demangle also reads a C variable named "w" or
// "b" as a type ("wchar_t", "bool").
char* demangle(const char* name) {
  if (std::strncmp(name, "_Z", 2) != 0) return nullptr;
  int status = -1;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status == 0) return d;
  std::free(d);
  return nullptr;
}

const char* short_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void symbolize(const void* pc, bool return_address, char* out, std::size_t size) {
  const auto at = reinterpret_cast<std::uintptr_t>(pc) - (return_address ? 1 : 0);
  Dl_info info{};
  link_map* map = nullptr;
  if (!::dladdr1(reinterpret_cast<const void*>(at), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) ||
      !info.dli_fname) {
    std::snprintf(out, size, "%p", pc);
    return;
  }
  std::string path = info.dli_fname[0] ? info.dli_fname : "/proc/self/exe";
  const char* name = nullptr;
  std::uintptr_t offset = 0;
  if (info.dli_sname && info.dli_saddr) {
    name = info.dli_sname;
    offset = reinterpret_cast<std::uintptr_t>(pc) - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  } else if (const FunctionSymbol* f = find_in_file(path, at - (map ? map->l_addr : 0))) {
    name = f->name;
    offset = reinterpret_cast<std::uintptr_t>(pc) - (map ? map->l_addr : 0) - f->lo;
  }
  const char* object = info.dli_fname[0] ? short_name(info.dli_fname) : "the program";
  if (!name) {
    std::snprintf(out, size, "%p (%s+0x%lx)", pc, object,
                  static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(pc) -
                                             reinterpret_cast<std::uintptr_t>(info.dli_fbase)));
    return;
  }
  char* demangled = demangle(name);
  std::snprintf(out, size, "%s+0x%lx (%s)", demangled ? demangled : name,
                static_cast<unsigned long>(offset), object);
  std::free(demangled);
}

bool name_variable(const void* p, char* out, std::size_t size) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  Dl_info info{};
  link_map* map = nullptr;
  if (!::dladdr1(p, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) || !info.dli_fname) return false;
  const char* name = nullptr;
  std::uintptr_t offset = 0;
  const FunctionSymbol* v = find_in_file(info.dli_fname[0] ? info.dli_fname : "/proc/self/exe",
                                         at - (map ? map->l_addr : 0), true);
  if (v) {
    name = v->name;
    offset = at - (map ? map->l_addr : 0) - v->lo;
  } else if (info.dli_sname && info.dli_saddr) {
    name = info.dli_sname;
    offset = at - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  }
  if (!name) return false;
  char* demangled = demangle(name);
  if (offset)
    std::snprintf(out, size, "%s+0x%lx", demangled ? demangled : name, static_cast<unsigned long>(offset));
  else
    std::snprintf(out, size, "%s", demangled ? demangled : name);
  std::free(demangled);
  return true;
}

void print_frames(void* const* frames, int first, int n, bool interrupted, int fd) {
  char line[640];
  for (int i = first; i < n; ++i) {
    char name[600];
    symbolize(frames[i], !(interrupted && i == first), name, sizeof name);
    int len = std::snprintf(line, sizeof line, "  #%d %s\n", i - first, name);
    if (len > 0 && ::write(fd, line, std::min<std::size_t>(std::size_t(len), sizeof line - 1)) < 0) return;
  }
}

}  // namespace loom::rt

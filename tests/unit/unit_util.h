// Small helpers shared by the unit tests: a monotonic clock in milliseconds, and environment
// variables set, unset, saved and restored with the parameter cache kept in step.
#ifndef MEND_TESTS_UNIT_UNIT_UTIL_H_
#define MEND_TESTS_UNIT_UNIT_UTIL_H_

#include <stdlib.h>
#include <time.h>

#include <string>
#include <vector>

extern "C" {
#include "misc/param.h"
}

namespace mendtest {

inline double nowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Set (or unset with nullptr) a variable and drop the parameter cache.
inline void setEnv(const char* name, const char* value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
  mendParamResetCache();
}

// Saves variables and unsets them; Restore() puts back each one as it was (set or unset).  The
// caller resets whatever caches the variables feed.
class EnvSnapshot {
 public:
  template <size_t K>
  void SaveAndUnset(const char* const (&names)[K]) {
    for (const char* n : names) SaveAndUnset(n);
  }
  void SaveAndUnset(const char* name) {
    const char* old = getenv(name);
    saved_.push_back({name, old != nullptr, old ? old : ""});
    unsetenv(name);
  }
  void Restore() {
    for (const Saved& s : saved_) {
      if (s.wasSet) setenv(s.name.c_str(), s.value.c_str(), 1);
      else unsetenv(s.name.c_str());
    }
    saved_.clear();
  }

 private:
  struct Saved {
    std::string name;   // the variable
    bool wasSet;        // it was set when saved
    std::string value;  // its value then
  };
  std::vector<Saved> saved_;
};

}  // namespace mendtest

#endif

// The misc layer: logging (levels, subsystems, line format, once/sparse, last error), the parameter
// registry (environment, config files, bad values, unknown names), fault injection, hashes, host
// identity, and the version/error-string API.
#include <gtest/gtest.h>

#include <dirent.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "misc/debug.h"
#include "misc/fault.h"
#include "misc/param.h"
#include "misc/utils.h"
#include "misc/version.h"
#include "nccl.h"
}

namespace {

// Variables the tests change; saved before and restored after every test.
const char* kTouched[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_CONF_FILE", "HOME",
                          "NCCL_WARN_ENABLE_DEBUG_INFO", "MEND_FAULT_INJECT", "NCCL_HOSTID", "MEND_BOGUS_KNOB",
                          "NCCL_BOGUS_KNOB", "NCCL_IB_HCA", "NCCL_NVLS_ENABLE", "MEND_CONF_ONLY_KNOB"};

void resetAll() {
  mendParamResetCache();
  mendDebugReset();
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string hostShort() {
  char h[256];
  mendHostName(h, sizeof(h));
  return h;
}

// POSIX extended regex: <regex>'s templates trip GCC 12's -Wmaybe-uninitialized under ASan (-Werror).
bool ereSearch(const std::string& text, const char* ere) {
  regex_t re;
  if (regcomp(&re, ere, REG_EXTENDED | REG_NOSUB) != 0) {
    ADD_FAILURE() << "bad regex " << ere;
    return false;
  }
  bool found = regexec(&re, text.c_str(), 0, nullptr, 0) == 0;
  regfree(&re);
  return found;
}

int countOf(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) n++;
  return n;
}

class MiscEnv : public ::testing::Test {
 protected:
  std::map<std::string, std::string> saved_;
  std::set<std::string> unset_;
  std::string dir_;

  void SetUp() override {
    for (const char* v : kTouched) {
      const char* s = getenv(v);
      if (s) saved_[v] = s; else unset_.insert(v);
      if (strcmp(v, "HOME") != 0) unsetenv(v);
    }
    char tmpl[] = "/tmp/mend-misc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("NCCL_CONF_FILE", (dir_ + "/none.conf").c_str(), 1);  // keep ~/.nccl.conf out of the tests
    resetAll();
  }
  void TearDown() override {
    for (auto& kv : saved_) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    for (auto& v : unset_) unsetenv(v.c_str());
    mendFaultClear();
    mendDebugSetDevice(-1);
    mendVersionSetCuda(0);
    resetAll();
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (system(cmd.c_str()) != 0) ADD_FAILURE() << "cannot remove " << dir_;
  }
  // Log to <dir>/log.%h.%p.%% at `level`; returns the path the library must have expanded it to.
  std::string logTo(const char* level, const char* subsys) {
    setenv("NCCL_DEBUG", level, 1);
    if (subsys) setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
    setenv("NCCL_DEBUG_FILE", (dir_ + "/log.%h.%p.%%").c_str(), 1);
    resetAll();
    mendDebugInit();
    return dir_ + "/log." + hostShort() + "." + std::to_string(getpid()) + ".%";
  }
  std::string writeConf(const char* name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
};

using LoggingTest = MiscEnv;
using ParamsTest = MiscEnv;
using FaultTest = MiscEnv;
using MiscTest = MiscEnv;

// ---- logging ----

TEST(LoggingParse, Levels) {
  EXPECT_EQ(mendDebugParseLevel("VERSION"), NCCL_LOG_VERSION);
  EXPECT_EQ(mendDebugParseLevel("warn"), NCCL_LOG_WARN);
  EXPECT_EQ(mendDebugParseLevel("Info"), NCCL_LOG_INFO);
  EXPECT_EQ(mendDebugParseLevel("ABORT"), NCCL_LOG_ABORT);
  EXPECT_EQ(mendDebugParseLevel("trace"), NCCL_LOG_TRACE);
  EXPECT_EQ(mendDebugParseLevel("3"), NCCL_LOG_INFO);
  EXPECT_EQ(mendDebugParseLevel(""), NCCL_LOG_NONE);
  EXPECT_EQ(mendDebugParseLevel(nullptr), NCCL_LOG_NONE);
  EXPECT_EQ(mendDebugParseLevel("verbose"), -1);
  EXPECT_EQ(mendDebugParseLevel("7"), -1);
}

TEST(LoggingParse, Subsystems) {
  char bad[64];
  EXPECT_EQ(mendDebugParseSubsys("INIT,NET", bad, sizeof(bad)), (uint64_t)(NCCL_INIT | NCCL_NET));
  EXPECT_STREQ(bad, "");
  EXPECT_EQ(mendDebugParseSubsys("init,bootstrap,env", bad, sizeof(bad)),
            (uint64_t)(NCCL_INIT | NCCL_BOOTSTRAP | NCCL_ENV));
  EXPECT_EQ(mendDebugParseSubsys("^NET", bad, sizeof(bad)), ~(uint64_t)NCCL_NET);
  EXPECT_EQ(mendDebugParseSubsys("^NET,COLL", bad, sizeof(bad)), ~(uint64_t)(NCCL_NET | NCCL_COLL));
  EXPECT_EQ(mendDebugParseSubsys("ALL", bad, sizeof(bad)), ~0ULL);
  EXPECT_EQ(mendDebugParseSubsys("RESIL,RAS", bad, sizeof(bad)), (uint64_t)(MEND_RESIL | NCCL_RAS));
  EXPECT_EQ(mendDebugParseSubsys("INIT,NETT", bad, sizeof(bad)), (uint64_t)NCCL_INIT);
  EXPECT_STREQ(bad, "NETT");
  EXPECT_EQ(mendDebugParseSubsys("", bad, sizeof(bad)), 0u);
}

TEST_F(LoggingTest, InfoAndWarnLineFormat) {
  std::string path = logTo("INFO", "INIT");
  mendDebugSetDevice(3);
  INFO(NCCL_INIT, "hello %d", 42);
  INFO(NCCL_NET, "this subsystem is filtered out");
  TRACE(NCCL_INIT, "above the level");
  int warnLine = __LINE__ + 1;
  WARN("bad thing %s", "x");
  std::string log = readFile(path);
  std::string who = hostShort() + ":" + std::to_string(getpid()) + ":" + std::to_string((int)syscall(SYS_gettid));
  EXPECT_NE(log.find(who + " [3] NCCL INFO hello 42\n"), std::string::npos) << log;
  EXPECT_NE(log.find("\n\n" + who + " [3] " + __FILE__ + ":" + std::to_string(warnLine) + " NCCL WARN bad thing x\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("filtered out"), std::string::npos);
  EXPECT_EQ(log.find("above the level"), std::string::npos);
}

TEST_F(LoggingTest, TraceAddsMillisecondsAndCallOmitsDevice) {
  std::string path = logTo("TRACE", "ALL");
  TRACE(NCCL_INIT, "traced %s", "step");
  TRACE(NCCL_CALL, "ncclFoo(%d)", 1);
  std::string log = readFile(path);
  const char* trace = ":[0-9]+:[0-9]+ \\[-1\\] [0-9]+\\.[0-9]+ [A-Za-z_]+:[0-9]+ NCCL TRACE traced step\n";
  EXPECT_TRUE(ereSearch(log, trace)) << log;
  EXPECT_TRUE(ereSearch(log, ":[0-9]+:[0-9]+ NCCL CALL ncclFoo\\(1\\)\n")) << log;
}

TEST_F(LoggingTest, WarnLevelHidesInfo) {
  std::string path = logTo("WARN", "ALL");
  INFO(NCCL_INIT, "hidden info");
  WARN("visible warn");
  std::string log = readFile(path);
  EXPECT_EQ(log.find("hidden info"), std::string::npos);
  EXPECT_NE(log.find("NCCL WARN visible warn"), std::string::npos) << log;
}

TEST_F(LoggingTest, NoLevelPrintsNothingButKeepsLastError) {
  std::string path = logTo("", nullptr);  // NCCL_DEBUG empty: level NONE, no file opened
  WARN("quiet failure %d", 7);
  EXPECT_STREQ(ncclGetLastError(nullptr), "quiet failure 7");
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

static void sayOnce(int i) { INFO_ONCE(NCCL_INIT, "once %d", i); }
static void warnOnce(int i) { WARN_ONCE("warn once %d", i); }
static void flap(int i) { WARN_SPARSE(300, "link flap %d", i); }

TEST_F(LoggingTest, OnceAndSparse) {
  std::string path = logTo("INFO", "INIT");
  for (int i = 0; i < 5; i++) sayOnce(i);
  for (int i = 0; i < 5; i++) warnOnce(i);
  for (int i = 0; i < 10; i++) flap(i);
  std::string log = readFile(path);
  EXPECT_EQ(countOf(log, "NCCL INFO once "), 1) << log;
  EXPECT_NE(log.find("once 0"), std::string::npos);
  EXPECT_EQ(countOf(log, "NCCL WARN warn once"), 1) << log;
  EXPECT_EQ(countOf(log, "NCCL WARN link flap"), 1) << log;
  EXPECT_STREQ(ncclGetLastError(nullptr), "link flap 9");  // suppressed WARNs still update it
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  flap(10);
  log = readFile(path);
  EXPECT_EQ(countOf(log, "NCCL WARN link flap"), 2) << log;
  EXPECT_NE(log.find("NCCL WARN link flap 10\n"), std::string::npos) << log;
  EXPECT_NE(log.find("NCCL WARN (9 similar messages suppressed)\n"), std::string::npos) << log;
}

TEST_F(LoggingTest, LastErrorIsLastWarn) {
  logTo("WARN", nullptr);
  WARN("first");
  WARN("second %d", 2);
  EXPECT_STREQ(ncclGetLastError(nullptr), "second 2");
  EXPECT_STREQ(ncclGetLastError((ncclComm_t)0x1234), "second 2");  // the comm is ignored
  char copy[64];
  mendDebugLastErrorCopy(copy, sizeof(copy));
  EXPECT_STREQ(copy, "second 2");
}

TEST_F(LoggingTest, WarnEnableDebugInfoRaisesLevel) {
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "1", 1);
  std::string path = logTo("WARN", "INIT");
  INFO(NCCL_INIT, "before the warning");
  WARN("trigger");
  INFO(NCCL_INIT, "after the warning");
  std::string log = readFile(path);
  EXPECT_EQ(log.find("before the warning"), std::string::npos) << log;
  EXPECT_NE(log.find("NCCL INFO after the warning"), std::string::npos) << log;
}

// Not a MiscEnv test: a "threadsafe" death test runs the whole test again in a child, SetUp included,
// and the child dies before TearDown would remove SetUp's directory.  The child alone sets the
// level; its log goes to stderr, where the abort notice is printed anyway.
TEST(LoggingAbort, AbortLevelAbortsOnWarn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("NCCL_DEBUG", "ABORT", 1);
        unsetenv("NCCL_DEBUG_FILE");
        setenv("NCCL_CONF_FILE", "/nonexistent/mend-none.conf", 1);  // keep ~/.nccl.conf out
        resetAll();
        mendDebugInit();
        WARN("fatal %d", 1);
      },
      "aborting after a WARN");
}

TEST_F(LoggingTest, UnknownLevelFallsBackToWarn) {
  std::string path = logTo("LOUD", nullptr);
  EXPECT_EQ(mendDebugLevel, NCCL_LOG_WARN);
  std::string log = readFile(path);
  EXPECT_NE(log.find("NCCL_DEBUG=LOUD is not a level"), std::string::npos) << log;
}

TEST_F(LoggingTest, ResetDebugInitRereadsEnvironment) {
  setenv("NCCL_DEBUG", "WARN", 1);
  resetAll();
  EXPECT_FALSE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_INIT));
  setenv("NCCL_DEBUG", "INFO", 1);
  EXPECT_FALSE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_INIT));  // cached until reset
  mendParamResetCache();
  ncclResetDebugInit();
  EXPECT_TRUE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_INIT));
  EXPECT_FALSE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_NET));  // default subsystems
}

TEST_F(LoggingTest, ConcurrentLinesDoNotMix) {
  std::string path = logTo("INFO", "INIT");
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; t++)
    ts.emplace_back([t] {
      for (int i = 0; i < 200; i++) INFO(NCCL_INIT, "thread %d line %d payload-payload-payload", t, i);
    });
  for (auto& t : ts) t.join();
  std::ifstream f(path);
  const char* line = "^[^ ]+:[0-9]+:[0-9]+ \\[-1\\] NCCL INFO thread [0-3] line [0-9]+ payload-payload-payload$";
  int n = 0;
  for (std::string l; std::getline(f, l);) {
    EXPECT_TRUE(ereSearch(l, line)) << l;
    n++;
  }
  EXPECT_EQ(n, 800);
}

TEST_F(LoggingTest, VersionBanner) {
  std::string path = logTo("WARN", nullptr);
  mendPrintVersionBanner();
  mendPrintVersionBanner();
  std::string log = readFile(path);
  EXPECT_EQ(log, std::string("NCCL version ") + mendVersionString() + "+host\n");
  mendVersionSetCuda(12040);
  path = logTo("INFO", "INIT");
  mendPrintVersionBanner();
  log = readFile(path);
  EXPECT_NE(log.find(std::string("NCCL INFO NCCL version ") + mendVersionString() + "+cuda12.4\n"), std::string::npos)
      << log;
}

// ---- parameters ----

TEST(ParamsParse, Integers) {
  int64_t v = 0;
  EXPECT_TRUE(mendParamParseInt("42", &v)); EXPECT_EQ(v, 42);
  EXPECT_TRUE(mendParamParseInt(" 42 ", &v)); EXPECT_EQ(v, 42);
  EXPECT_TRUE(mendParamParseInt("+7", &v)); EXPECT_EQ(v, 7);
  EXPECT_TRUE(mendParamParseInt("-5", &v)); EXPECT_EQ(v, -5);
  EXPECT_TRUE(mendParamParseInt("0x1f", &v)); EXPECT_EQ(v, 31);
  EXPECT_TRUE(mendParamParseInt("0X10", &v)); EXPECT_EQ(v, 16);
  EXPECT_TRUE(mendParamParseInt("-0x10", &v)); EXPECT_EQ(v, -16);
  EXPECT_TRUE(mendParamParseInt("010", &v)); EXPECT_EQ(v, 10);  // decimal, not octal
  EXPECT_TRUE(mendParamParseInt("9223372036854775807", &v)); EXPECT_EQ(v, INT64_MAX);
  EXPECT_TRUE(mendParamParseInt("-9223372036854775808", &v)); EXPECT_EQ(v, INT64_MIN);
  v = 99;
  for (const char* bad : {"", " ", "abc", "12abc", "0x", "--1", "1.5", "9223372036854775808", "0xg", "- 1"}) {
    EXPECT_FALSE(mendParamParseInt(bad, &v)) << bad;
    EXPECT_EQ(v, 99) << bad;
  }
}

TEST(ParamsRegistry, RowsAreWellFormedAndUnique) {
  std::set<std::string> seen;
  ASSERT_GT(mendParamCount(), 0);
  for (int i = 0; i < mendParamCount(); i++) {
    const mendParamInfo* p = mendParamGet(i);
    ASSERT_NE(p, nullptr);
    std::string env = p->env;
    /* NCCL's and Mend's names; and CUDA's one variable the library reads (never sets), which must say so. */
    bool cuda = env == "CUDA_DEVICE_MAX_CONNECTIONS";
    EXPECT_TRUE(env.rfind("NCCL_", 0) == 0 || env.rfind("MEND_", 0) == 0 || cuda) << env;
    if (cuda) {
      EXPECT_NE(std::string(p->doc).find("CUDA's own variable, read but never set"), std::string::npos);
    }
    EXPECT_TRUE(seen.insert(env).second) << env << " is declared twice in params.def (if your layer now uses a "
                                                   "row of the compatibility section, delete that row)";
    EXPECT_TRUE(p->doc && p->doc[0]) << env;
    EXPECT_NE(p->unit, nullptr) << env;
    EXPECT_EQ(mendParamFind(p->env), i);
  }
  EXPECT_EQ(mendParamGet(-1), nullptr);
  EXPECT_EQ(mendParamGet(mendParamCount()), nullptr);
  EXPECT_EQ(mendParamFind("NCCL_NOT_A_PARAM"), -1);
  int i = mendParamFind("NCCL_NVLS_ENABLE");
  ASSERT_GE(i, 0);
  EXPECT_STREQ(mendParamGet(i)->doc, "accepted for compatibility; no effect in Mend");
}

TEST_F(ParamsTest, IntegerFromEnvironmentHexAndCache) {
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), 0);  // default
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "0x10", 1);
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), 0);  // cached
  mendParamResetCache();
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), 16);
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "-3", 1);
  mendParamResetCache();
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), -3);
}

TEST_F(ParamsTest, BadIntegerWarnsAndUsesDefault) {
  std::string path = logTo("WARN", nullptr);
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "lots", 1);
  mendParamResetCache();
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), 0);
  std::string err = ncclGetLastError(nullptr);
  EXPECT_NE(err.find("NCCL_WARN_ENABLE_DEBUG_INFO"), std::string::npos) << err;
  EXPECT_NE(err.find("'lots'"), std::string::npos) << err;
  EXPECT_EQ(mendParamWarnEnableDebugInfo(), 0);
  EXPECT_EQ(countOf(readFile(path), "NCCL WARN Invalid value"), 1);  // warned once, not per call
}

TEST_F(ParamsTest, StringsAndDefaults) {
  EXPECT_STREQ(mendParamDebugSubsys(), "INIT,BOOTSTRAP,ENV");
  EXPECT_EQ(mendParamFaultInject(), nullptr);
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  mendParamResetCache();
  const char* v = mendParamDebugSubsys();
  EXPECT_STREQ(v, "NET");
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);  // the cached copy is not affected by the environment
  EXPECT_STREQ(v, "NET");
  EXPECT_STREQ(mendParamDebugSubsys(), "NET");
}

TEST_F(ParamsTest, ConfigFileBelowEnvironment) {
  std::string conf = writeConf("test.conf",
                               "# a comment\n"
                               "   \n"
                               "  MEND_FAULT_INJECT =  conf.site:1  \n"
                               "not a setting\n"
                               "NCCL_DEBUG_SUBSYS=NET\n"
                               "NCCL_DEBUG_SUBSYS=COLL\n"
                               "NCCL_HOSTID=from-conf\n");
  setenv("NCCL_CONF_FILE", conf.c_str(), 1);
  setenv("NCCL_HOSTID", "from-env", 1);
  mendParamResetCache();
  EXPECT_STREQ(mendGetEnv("MEND_FAULT_INJECT"), "conf.site:1");
  EXPECT_STREQ(mendParamFaultInject(), "conf.site:1");
  EXPECT_STREQ(mendGetEnv("NCCL_DEBUG_SUBSYS"), "NET");  // first line wins
  EXPECT_STREQ(mendGetEnv("NCCL_HOSTID"), "from-env");   // the environment wins over the file
  EXPECT_EQ(mendGetEnv("NCCL_NOT_IN_FILE"), nullptr);
  EXPECT_EQ(mendGetEnv(nullptr), nullptr);
  setenv("MEND_FAULT_INJECT", "env.site:2", 1);
  mendParamResetCache();
  EXPECT_STREQ(mendParamFaultInject(), "env.site:2");
  // The file also drives logging.
  setenv("NCCL_DEBUG", "INFO", 1);
  mendDebugReset();
  EXPECT_TRUE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_NET));
  EXPECT_FALSE(mendDebugEnabled(NCCL_LOG_INFO, NCCL_INIT));
}

TEST_F(ParamsTest, HomeConfigFile) {
  writeConf(".nccl.conf", "MEND_CONF_ONLY_KNOB=home\n");
  unsetenv("NCCL_CONF_FILE");
  setenv("HOME", dir_.c_str(), 1);
  mendParamResetCache();
  EXPECT_STREQ(mendGetEnv("MEND_CONF_ONLY_KNOB"), "home");
  // NCCL_CONF_FILE replaces ~/.nccl.conf.
  setenv("NCCL_CONF_FILE", writeConf("other.conf", "# empty\n").c_str(), 1);
  mendParamResetCache();
  EXPECT_EQ(mendGetEnv("MEND_CONF_ONLY_KNOB"), nullptr);
}

TEST_F(ParamsTest, UnknownVariablesReportedOnce) {
  std::string path = logTo("INFO", "ENV");
  setenv("MEND_BOGUS_KNOB", "1", 1);
  setenv("NCCL_BOGUS_KNOB", "1", 1);
  setenv("NCCL_IB_HCA", "mlx5_0", 1);   // a family Mend leaves alone quietly
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // registered as accepted-for-compatibility
  setenv("NCCL_CONF_FILE", writeConf("u.conf", "MEND_CONF_ONLY_KNOB=1\n").c_str(), 1);
  mendParamResetCache();
  mendParamCheckEnv();
  mendParamCheckEnv();
  std::string log = readFile(path);
  EXPECT_EQ(countOf(log, "NCCL WARN MEND_BOGUS_KNOB is set (environment) but is not a Mend parameter"), 1) << log;
  EXPECT_EQ(countOf(log, "NCCL INFO NCCL_BOGUS_KNOB is set (environment) but Mend does not use it"), 1) << log;
  EXPECT_EQ(countOf(log, "MEND_CONF_ONLY_KNOB is set (config file)"), 1) << log;
  EXPECT_EQ(log.find("NCCL_IB_HCA"), std::string::npos) << log;
  EXPECT_EQ(log.find("NCCL_NVLS_ENABLE is set"), std::string::npos) << log;
}

TEST_F(ParamsTest, ConcurrentGettersAgree) {
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "0x2a", 1);
  mendParamResetCache();
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; i++)
        if (mendParamWarnEnableDebugInfo() != 42) wrong++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---- fault injection ----

TEST_F(FaultTest, NthCallOnce) {
  EXPECT_EQ(mendFaultCheck("test.unarmed"), 0);
  mendFaultSet("test.site", 3, 0);
  std::vector<int> got;
  for (int i = 0; i < 6; i++) got.push_back(mendFaultCheck("test.site"));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(mendFaultCheck("test.other"), 0);
  EXPECT_EQ(mendFaultCalls("test.site"), 6);
  mendFaultClear();
  EXPECT_EQ(mendFaultCheck("test.site"), 0);
  EXPECT_EQ(mendFaultState, 0);
}

TEST_F(FaultTest, StickyFromNth) {
  mendFaultSet("test.sticky", 2, 1);
  std::vector<int> got;
  for (int i = 0; i < 5; i++) got.push_back(mendFaultCheck("test.sticky"));
  EXPECT_EQ(got, (std::vector<int>{0, 1, 1, 1, 1}));
}

TEST_F(FaultTest, FromEnvironment) {
  setenv("MEND_FAULT_INJECT", "a.x:2,b.y:1+", 1);
  mendParamResetCache();
  mendFaultReload();
  EXPECT_EQ(mendFaultCheck("a.x"), 0);
  EXPECT_EQ(mendFaultCheck("a.x"), 1);
  EXPECT_EQ(mendFaultCheck("a.x"), 0);
  EXPECT_EQ(mendFaultCheck("b.y"), 1);
  EXPECT_EQ(mendFaultCheck("b.y"), 1);
  EXPECT_EQ(mendFaultCheck("c.z"), 0);
}

TEST_F(FaultTest, BadSpecWarns) {
  logTo("WARN", nullptr);
  setenv("MEND_FAULT_INJECT", "a.x:2,nonsense", 1);
  mendParamResetCache();
  mendFaultReload();
  EXPECT_EQ(mendFaultCheck("a.x"), 0);
  EXPECT_EQ(mendFaultCheck("a.x"), 1);  // the good entry before the bad one still applies
  std::string err = ncclGetLastError(nullptr);
  EXPECT_NE(err.find("MEND_FAULT_INJECT"), std::string::npos) << err;
  EXPECT_NE(err.find("nonsense"), std::string::npos) << err;
}

TEST_F(FaultTest, ExactlyOneFailureAcrossThreads) {
  mendFaultSet("test.threads", 2000, 0);
  std::atomic<int> fails{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; t++)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; i++) fails += mendFaultCheck("test.threads");
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(fails.load(), 1);
  EXPECT_EQ(mendFaultCalls("test.threads"), 4000);
}

TEST_F(FaultTest, CallocSite) {
  int* p = nullptr;
  ASSERT_EQ(MENDCALLOC(p, 4), ncclSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p[0] | p[1] | p[2] | p[3], 0);
  free(p);
  mendFaultSet("host.calloc", 1, 0);
  p = (int*)0x1;
  EXPECT_EQ(MENDCALLOC(p, 4), ncclSystemError);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("host.calloc"), std::string::npos);
}

// ---- hashes, time, host identity ----

TEST(MiscHash, Fnv1a) {
  EXPECT_EQ(mendHash("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(mendHash("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(mendHash("foobar", 6), 0x85944171f73967e8ULL);
  EXPECT_NE(mendHashCombine(1, 2), mendHashCombine(2, 1));
}

TEST(MiscTime, Monotonic) {
  uint64_t a = mendTimeNs();
  int64_t ma = mendTimeMs();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint64_t b = mendTimeNs();
  EXPECT_GE(b - a, 20000000u);
  EXPECT_LT(b - a, 2000000000u);
  EXPECT_GE(mendTimeMs() - ma, 19);
}

TEST_F(MiscTest, HostIdentity) {
  std::string id = mendHostId();
  char host[256];
  gethostname(host, sizeof(host));
  EXPECT_EQ(id.rfind(std::string(host) + ":", 0), 0u) << id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (std::getline(boot, bootId)) {
    EXPECT_EQ(id, std::string(host) + ":" + bootId);
  }
  EXPECT_EQ(mendHostHash(), mendHash(id.data(), id.size()));
  uint64_t pidHash = mendPidHash();
  EXPECT_EQ(pidHash, mendPidHash());
  EXPECT_NE(pidHash, mendHostHash());

  setenv("NCCL_HOSTID", "rack7-node3", 1);
  mendParamResetCache();
  EXPECT_STREQ(mendHostId(), "rack7-node3");
  EXPECT_EQ(mendHostHash(), mendHash("rack7-node3", 11));
  EXPECT_NE(mendPidHash(), pidHash);
}

// ---- public API: version and error strings ----

TEST_F(MiscTest, GetVersion) {
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(v, 23007);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("NULL"), std::string::npos);
  EXPECT_EQ(pncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST(MiscErrors, ErrorStrings) {
  std::set<std::string> seen;
  for (int r = ncclSuccess; r < ncclNumResults; r++) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    ASSERT_NE(s, nullptr);
    EXPECT_GT(strlen(s), 5u);
    EXPECT_STRNE(s, "unknown result code") << r;
    EXPECT_TRUE(seen.insert(s).second) << r;
  }
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_NE(std::string(ncclGetErrorString(ncclInProgress)).find("in progress"), std::string::npos);
  EXPECT_NE(std::string(ncclGetErrorString(ncclTimeout)).find("timeout"), std::string::npos);
  EXPECT_STREQ(ncclGetErrorString((ncclResult_t)9), "unknown result code");
  EXPECT_STREQ(ncclGetErrorString((ncclResult_t)-1), "unknown result code");
  EXPECT_STREQ(ncclGetErrorString((ncclResult_t)1000), "unknown result code");
}

}  // namespace

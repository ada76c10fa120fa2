// `mvmm --report FILE`: one JSON document about this run, written at exit, also when mvmm
// fails (exits 1-4).  Its fields are documented in README.md ("Boot report") and stable: a
// change of meaning gets a new "version".  Timestamps are monotonic ns since mvmm started.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/fd.h"
#include "vmm/report/exit_figures.h"
#include "vmm/report/guest_marks.h"
#include "vmm/report/process_clock.h"

namespace mvmm {

enum class BootEvent : size_t {
    RamReady,         // guest RAM mapped (and preallocated when asked)
    DevicesReady,     // devices created and disks attached
    GuestLoaded,      // kernel, initrd and ACPI tables in guest RAM, vCPUs set up
    FirstKvmRun,      // vCPU 0 entered the guest for the first time
    FirstSerialByte,  // the guest's first console byte
    GuestStopped,     // the machine was asked to end: poweroff, reset, crash or an error
    Exit,             // the report was written
};

class BootReport {
  public:
    static constexpr size_t kMaxMarks = 4096;

    // Creates (truncates) `path` now: a path that cannot be written is a UsageError before the
    // guest runs.
    explicit BootReport(const std::string& path);

    // The first stamp of each event counts.  Any thread.
    void stamp(BootEvent event) noexcept;
    // The guest's console output, in order (the UART's transmit tap).
    void serial_byte(uint8_t byte);
    // Why the run ends; the first reason counts.
    void stopping(const std::string& reason);
    void set_figures(ExitFigures figures);

    // The whole document; without figures from the machine, the process's own are read now.
    nlohmann::json document(int exit_code);
    // Stamps Exit and writes the document; false (and logged) when writing failed.
    bool write(int exit_code);

  private:
    nlohmann::json timeline() const;
    nlohmann::json marks() const;
    void mark_seen(GuestMark mark);  // requires console_mutex_

    Fd file_;
    std::string path_;
    static constexpr size_t kEvents = size_t(BootEvent::Exit) + 1;
    std::array<std::atomic<int64_t>, kEvents> events_;

    mutable std::mutex console_mutex_;
    MarkReader reader_;
    std::vector<GuestMark> marks_;
    uint64_t marks_dropped_ = 0;
    std::optional<nlohmann::json> heap_after_disks_;
    nlohmann::json heap_at_marks_ = nlohmann::json::object();  // by mark name: the last one

    std::mutex exit_mutex_;
    std::optional<std::string> reason_;
    std::optional<ExitFigures> figures_;
};

}  // namespace mvmm

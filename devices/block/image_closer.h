// Closes disk images on a thread of its own.  An image's last flush (fdatasync) may take long,
// and whoever lets go of a removed disk last may be an I/O thread that serves other disks (the
// disk's last request completing there) or the management thread: neither should wait for it.
// What close() is given is destroyed there in the order given; the destructor destroys what is
// still queued, then joins.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

namespace mvmm::devices::block {

class ImageCloser {
  public:
    ImageCloser();
    ~ImageCloser();
    ImageCloser(const ImageCloser&) = delete;
    ImageCloser& operator=(const ImageCloser&) = delete;

    // Takes the last owner of something that closes an image when destroyed (the image
    // itself, or whatever holds it) and destroys it on the closer's thread, after everything
    // given before.  Never blocks on the image; without memory to queue it, destroys it here.
    void close(std::shared_ptr<const void> last_owner) noexcept;

  private:
    void serve(std::stop_token stop);

    std::mutex mutex_;
    std::condition_variable_any wake_;
    std::vector<std::shared_ptr<const void>> queue_;
    std::jthread thread_;  // last: stops first
};

}  // namespace mvmm::devices::block

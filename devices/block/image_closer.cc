#include "devices/block/image_closer.h"

#include <utility>

namespace mvmm::devices::block {

ImageCloser::ImageCloser() : thread_([this](std::stop_token stop) { serve(stop); }) {}

ImageCloser::~ImageCloser() {
    thread_.request_stop();
    thread_.join();
}

void ImageCloser::close(std::shared_ptr<const void> last_owner) noexcept {
    try {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(last_owner));
    } catch (...) {
        return;  // no memory to queue it: `last_owner` goes here, as it would without a closer
    }
    wake_.notify_one();
}

void ImageCloser::serve(std::stop_token stop) {
    std::vector<std::shared_ptr<const void>> closing;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, stop, [this] { return !queue_.empty(); });
            if (queue_.empty()) return;  // stopped with nothing left to close
            closing.swap(queue_);
        }
        for (auto& owner : closing) owner.reset();  // in order: flushes, closes
        closing.clear();
    }
}

}  // namespace mvmm::devices::block

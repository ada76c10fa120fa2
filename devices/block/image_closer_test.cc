// ImageCloser: what it is given is destroyed on its thread, in order, never on the caller's; its
// destructor destroys what is still queued.
#include "devices/block/image_closer.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace mvmm::devices::block {
namespace {

struct Closings {
    std::mutex mutex;
    std::vector<std::pair<int, std::thread::id>> done;  // which, and on what thread

    std::shared_ptr<const void> owner(int which) {
        return std::shared_ptr<const void>(nullptr, [this, which](const void*) {
            std::lock_guard lock(mutex);
            done.emplace_back(which, std::this_thread::get_id());
        });
    }
};

TEST(ImageCloser, DestroysOnItsThreadInTheOrderGiven) {
    Closings closings;
    std::promise<void> release;
    {
        ImageCloser closer;
        // The first waits until the test has queued the rest: none of them may run here.
        closer.close(std::shared_ptr<const void>(nullptr, [&](const void*) {
            release.get_future().wait();
            std::lock_guard lock(closings.mutex);
            closings.done.emplace_back(0, std::this_thread::get_id());
        }));
        for (int i = 1; i <= 3; ++i) closer.close(closings.owner(i));
        EXPECT_TRUE(closings.done.empty()) << "close() never destroys on the caller's thread";
        release.set_value();
    }  // the destructor closes what is still queued
    ASSERT_EQ(closings.done.size(), 4u);
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(closings.done[i].first, i);
        EXPECT_NE(closings.done[i].second, std::this_thread::get_id());
        EXPECT_EQ(closings.done[i].second, closings.done[0].second) << "one thread";
    }
}

TEST(ImageCloser, AnOwnerOthersStillShareGoesOnlyWithTheLastOfThem) {
    Closings closings;
    auto shared = closings.owner(1);
    {
        ImageCloser closer;
        closer.close(shared);  // a copy: the test's still holds it
    }
    EXPECT_TRUE(closings.done.empty());
    shared.reset();
    ASSERT_EQ(closings.done.size(), 1u);
    EXPECT_EQ(closings.done[0].second, std::this_thread::get_id());
}

}  // namespace
}  // namespace mvmm::devices::block

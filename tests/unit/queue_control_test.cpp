// The control steps every driver's completion queues share (drivers/common/queue_control.hpp)
// and the completion queue core they poll through, over stand-in queue pairs and completion
// queues.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <sys/eventfd.h>
#include <unistd.h>

#include "../../drivers/common/queue_control.hpp"
#include "vfab/drivers/common/stat_counter.hpp"

namespace vfab::queue {
namespace {

struct FakeQp {
    QpState st = QpState::ready;
    bool ready = false;   // a completion is waiting
    QpState state() const { return st; }
    bool send_ready() const { return ready; }
    bool recv_ready() const { return ready; }
    uint32_t poll_send(Completion*, uint32_t) { return 0; }
    uint32_t poll_recv(Completion*, uint32_t) { return 0; }
};

struct FakeDevice {};

class FakeCq : public CompletionQueueCore<FakeQp> {
public:
    FakeCq(const FakeDevice* dev, uint32_t vector, int efd = -1) : CompletionQueueCore(16, vector, efd), dev_(dev) {}
    void take(FakeQp* send, FakeQp* recv) { send_qp_ = send, recv_qp_ = recv; }
    void kill() { destroyed_ = true; }

private:
    friend struct queue::Control;
    const FakeDevice* dev_;
};

TEST(QueueControl, ANewCompletionQueueTakesTheLowestFreeVector) {
    FakeDevice dev;
    std::vector<std::unique_ptr<FakeCq>> cqs;
    EXPECT_EQ(*Control::free_vector(cqs, 1, 4, "dev"), 1u);
    cqs.push_back(std::make_unique<FakeCq>(&dev, 1));
    cqs.push_back(std::make_unique<FakeCq>(&dev, 2));
    EXPECT_EQ(*Control::free_vector(cqs, 1, 4, "dev"), 3u);
    cqs[0]->kill();   // a destroyed CQ gives its vector back
    EXPECT_EQ(*Control::free_vector(cqs, 1, 4, "dev"), 1u);
    cqs.push_back(std::make_unique<FakeCq>(&dev, 1));
    cqs.push_back(std::make_unique<FakeCq>(&dev, 3));
    auto none = Control::free_vector(cqs, 1, 4, "0000:00:02.0");
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().code, ENOSPC);
    EXPECT_NE(none.error().message.find("all 3 completion queues are in use"), std::string::npos) << none.error().message;
}

TEST(QueueControl, ACompletionQueueInUseIsNotDestroyedAndOnlyOnce) {
    FakeDevice dev;
    FakeQp qp;
    FakeCq cq(&dev, 0);
    cq.take(&qp, nullptr);
    auto busy = Control::destroy(cq);
    ASSERT_FALSE(busy);
    EXPECT_EQ(busy.error().code, EBUSY);
    EXPECT_FALSE(cq.destroyed());
    Control::detach(cq, cq, &qp);
    EXPECT_TRUE(Control::destroy(cq));
    EXPECT_TRUE(cq.destroyed());
    EXPECT_EQ(Control::destroy(cq).error().code, ENODEV);
    Completion wc[1];
    EXPECT_EQ(cq.poll(wc), -ENODEV);
    EXPECT_EQ(Control::check_armable(cq).error().code, ENODEV);
}

TEST(QueueControl, ANewQueuePairsCompletionQueuesAreChecked) {
    FakeDevice dev, other;
    FakeQp qp;
    FakeCq a(&dev, 0), b(&dev, 1), foreign(&other, 0), dead(&dev, 2);
    dead.kill();
    EXPECT_TRUE(Control::check_cqs(&dev, &a, &a, true));
    EXPECT_EQ(Control::check_cqs(&dev, &a, static_cast<FakeCq*>(nullptr), true).error().code, EINVAL);
    EXPECT_EQ(Control::check_cqs(&dev, &foreign, &a, true).error().code, EINVAL);
    EXPECT_EQ(Control::check_cqs(&dev, &a, &dead, true).error().code, ENODEV);
    Control::attach(a, b, &qp);   // a takes qp's sends, b its receives
    EXPECT_EQ(Control::check_cqs(&dev, &a, &a, true).error().code, EBUSY) << "a already takes sends";
    EXPECT_TRUE(Control::check_cqs(&dev, &b, &a, true)) << "b's sends and a's receives are free";
    EXPECT_TRUE(Control::check_cqs(&dev, &a, &a, false)) << "a device of one queue pair does not ask";
}

// arm()'s last step: the channel fires at once when a completion is waiting or a queue pair
// left the ready state, so arm-then-sleep never sleeps through either.
TEST(QueueControl, ArmSignalsAtOnceWhenThereIsSomethingToSee) {
    FakeDevice dev;
    const int efd = ::eventfd(0, EFD_NONBLOCK);
    ASSERT_GE(efd, 0);
    FakeCq cq(&dev, 0, efd);
    FakeQp qp;
    cq.take(&qp, &qp);
    uint64_t v = 0;
    Control::signal_if_ready(cq);
    EXPECT_LT(::read(efd, &v, sizeof v), 0) << "nothing waiting: no signal";
    qp.ready = true;
    Control::signal_if_ready(cq);
    EXPECT_EQ(::read(efd, &v, sizeof v), ssize_t(sizeof v));
    qp.ready = false;
    qp.st = QpState::error;
    Control::signal_if_ready(cq);
    EXPECT_EQ(::read(efd, &v, sizeof v), ssize_t(sizeof v));
    std::vector<std::unique_ptr<FakeCq>> cqs;
    cqs.push_back(std::make_unique<FakeCq>(&dev, 1, efd));
    Control::wake_all(cqs);
    EXPECT_EQ(::read(efd, &v, sizeof v), ssize_t(sizeof v));
    ::close(efd);
}

TEST(StatCounter, AddsAndReads) {
    StatCounter c;
    EXPECT_EQ(c.get(), 0u);
    c.add(5);
    c.add(uint64_t(1) << 40);
    EXPECT_EQ(c.get(), 5 + (uint64_t(1) << 40));
    c.add(~uint64_t(0));   // adding 2^64 - 1 takes one away
    EXPECT_EQ(c.get(), 4 + (uint64_t(1) << 40));
}

}  // namespace
}  // namespace vfab::queue

// grpc_peer.cc - the gRPC C++ side of bench/rpc: an echo server and a load generator.
//
//   rpc-bench-grpc serve PORT
//       sync server (grpc::Service, Debian's libgrpc++ 1.51 defaults) on
//       127.0.0.1:PORT, insecure credentials; stops on SIGTERM/SIGINT.
//   rpc-bench-grpc load HOST:PORT CLIENTS DATA_LEN WARMUP_MS DURATION_MS OUT
//       CLIENTS threads, each with its own channel and stub, call Echo in a
//       closed loop, exactly as troupe-bench-rpc's C clients do (load.c), and
//       write the window's latencies to OUT for the driver to summarise.
//
// Each channel asks for a local subchannel pool: by default gRPC shares one
// TCP connection among channels with equal arguments, and then "a channel per
// client" would not mean a connection per client as it does for nng and troupe.
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "echo.grpc.pb.h"

namespace
{

constexpr uint64_t kMagic = 0x31434552504752ull; // "RGPREC1", see servers.c
constexpr int kCallTimeoutMs = 10000;
enum Phase { kWarmup, kMeasure, kStop };

uint64_t NowNs()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

class EchoService final : public benchrpc::Echo::Service
{
    grpc::Status Echo(grpc::ServerContext *, const benchrpc::EchoMsg *req, benchrpc::EchoMsg *rep) override
    {
        *rep = *req;
        return grpc::Status::OK;
    }
};

int Serve(const std::string &port)
{
    sigset_t sigs;
    int sig = 0;
    EchoService svc;
    grpc::ServerBuilder b;

    // Block the stop signals before gRPC starts threads so only sigwait sees them.
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    b.AddListeningPort("127.0.0.1:" + port, grpc::InsecureServerCredentials());
    b.RegisterService(&svc);
    b.SetMaxReceiveMessageSize(4 * 1024 * 1024); // troupe's default frame limit
    std::unique_ptr<grpc::Server> server = b.BuildAndStart();
    if (!server) {
        std::fprintf(stderr, "rpc-bench-grpc: cannot listen on 127.0.0.1:%s\n", port.c_str());
        return 1;
    }
    sigwait(&sigs, &sig);
    server->Shutdown();
    return 0;
}

struct Load {
    std::string target;
    int clients = 0;
    size_t data_len = 0;
    int warmup_ms = 0, duration_ms = 0;
    std::string data;
    pthread_barrier_t ready;
    std::atomic<int> phase{kWarmup};
};

struct Worker {
    std::vector<uint64_t> lat;
    uint64_t errors = 0;
    bool connected = false;
};

bool OneCall(benchrpc::Echo::Stub &stub, const benchrpc::EchoMsg &req)
{
    grpc::ClientContext ctx; // one per call, as gRPC requires
    benchrpc::EchoMsg rep;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kCallTimeoutMs));
    grpc::Status st = stub.Echo(&ctx, req, &rep);
    return st.ok() && rep.data() == req.data();
}

void WorkerMain(Load *ld, Worker *w)
{
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto ch = grpc::CreateCustomChannel(ld->target, grpc::InsecureChannelCredentials(), args);
    auto stub = benchrpc::Echo::NewStub(ch);
    benchrpc::EchoMsg req;
    int ph;

    req.set_data(ld->data);
    w->connected = ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pthread_barrier_wait(&ld->ready);
    if (!w->connected) {
        return;
    }
    while ((ph = ld->phase.load(std::memory_order_relaxed)) != kStop) {
        uint64_t t0 = NowNs();
        bool ok = OneCall(*stub, req);
        uint64_t t1 = NowNs();
        if (ph != kMeasure) {
            continue;
        }
        if (ok) {
            w->lat.push_back(t1 - t0);
        } else {
            w->errors++;
        }
    }
}

int WriteResult(const char *path, const std::vector<Worker> &ws, uint64_t window)
{
    uint64_t errors = 0, n = 0;
    for (const Worker &w : ws) {
        errors += w.errors;
        n += w.lat.size();
    }
    FILE *f = std::fopen(path, "wb");
    if (f == nullptr) {
        return 1;
    }
    uint64_t hdr[4] = {kMagic, window, errors, n};
    std::fwrite(hdr, sizeof(hdr), 1, f);
    for (const Worker &w : ws) {
        std::fwrite(w.lat.data(), sizeof(uint64_t), w.lat.size(), f);
    }
    return std::fclose(f) == 0 ? 0 : 1;
}

int RunLoad(Load &ld, const char *out)
{
    std::vector<Worker> ws(size_t(ld.clients));
    std::vector<std::thread> th;

    for (size_t i = 0; i < ld.data_len; i++) {
        ld.data.push_back(char(uint8_t(i * 31u + 7u))); // the pattern of rpc_bench.c
    }
    pthread_barrier_init(&ld.ready, nullptr, unsigned(ld.clients) + 1);
    for (int i = 0; i < ld.clients; i++) {
        th.emplace_back(WorkerMain, &ld, &ws[size_t(i)]);
    }
    pthread_barrier_wait(&ld.ready);
    std::this_thread::sleep_for(std::chrono::milliseconds(ld.warmup_ms));
    uint64_t t0 = NowNs();
    ld.phase.store(kMeasure);
    std::this_thread::sleep_for(std::chrono::milliseconds(ld.duration_ms));
    ld.phase.store(kStop);
    uint64_t t1 = NowNs();
    for (std::thread &t : th) {
        t.join();
    }
    for (const Worker &w : ws) {
        if (!w.connected) {
            std::fprintf(stderr, "rpc-bench-grpc: a client could not connect to %s\n", ld.target.c_str());
            return 1;
        }
    }
    return WriteResult(out, ws, t1 - t0);
}

void Usage()
{
    std::fprintf(stderr, "usage: rpc-bench-grpc serve PORT\n"
                         "       rpc-bench-grpc load HOST:PORT CLIENTS DATA_LEN WARMUP_MS DURATION_MS OUT\n");
}

} // namespace

int main(int argc, char **argv)
{
    if (argc == 3 && std::string(argv[1]) == "serve") {
        return Serve(argv[2]);
    }
    if (argc == 8 && std::string(argv[1]) == "load") {
        Load ld;
        ld.target = argv[2];
        ld.clients = std::atoi(argv[3]);
        ld.data_len = size_t(std::atol(argv[4]));
        ld.warmup_ms = std::atoi(argv[5]);
        ld.duration_ms = std::atoi(argv[6]);
        if (ld.clients > 0 && ld.warmup_ms >= 0 && ld.duration_ms > 0) {
            return RunLoad(ld, argv[7]);
        }
    }
    Usage();
    return 2;
}

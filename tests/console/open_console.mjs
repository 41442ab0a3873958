// Keeps the console's overview page open in headless Chromium until this process gets
// SIGTERM or its stdin closes (bench/console_overhead.py uses it). Prints "ready" once the
// page shows the overview.
//   node open_console.mjs ADMIN_URL
import { chromium } from "playwright-core";

const [adminUrl] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto(adminUrl + "/#/overview");
await page.getByRole("heading", { name: "Overview" }).waitFor();
console.log("ready");
const stop = async () => { await browser.close(); process.exit(0); };
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.resume();

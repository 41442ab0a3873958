// The console on an admin port that needs a token: it asks for it, refuses a wrong one, and
// works with the right one.   node token.mjs ADMIN_URL TOKEN ARTIFACT_DIR
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import path from "node:path";

const [adminUrl, token, artifacts] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(15_000);
  await page.goto(adminUrl + "/#/overview");
  await page.getByRole("heading", { name: "Admin token" }).waitFor();
  await page.screenshot({ path: path.join(artifacts, "11-token-asked.png") });
  await page.getByLabel("Token").fill("not-the-token");
  const refused = page.waitForResponse((r) => r.url().includes("/api/overview") && r.status() === 401);
  await page.getByRole("button", { name: "Sign in" }).click();
  await refused;
  await page.getByRole("heading", { name: "Admin token" }).waitFor();
  if (await page.getByRole("heading", { name: "Overview" }).count()) throw new Error("a wrong token got in");
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  await page.locator(".chart svg").first().waitFor();
  console.log("token test passed");
} finally {
  await browser.close();
}
